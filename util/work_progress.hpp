// A process-wide count of model work done: each forward pass adds one per layer it finishes. The step watchdog reads
// it to tell a slow step from a hung one: on a machine whose cores are shared with other work a step may take many
// times its usual time while the count keeps moving, and a shard stuck (a collective waiting for a partner that never
// comes, a deadlock) stops it.
#pragma once

#include <cstdint>

namespace actorllm::util {

/// One unit of work done (a layer of a forward pass). Lock-free; cheap next to a layer.
void note_work_progress() noexcept;

/// The units done so far in this process (only ever grows).
uint64_t work_progress() noexcept;

}  // namespace actorllm::util
