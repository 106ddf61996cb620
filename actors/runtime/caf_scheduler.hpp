// How a process that also runs the model configures CAF's scheduler: few threads, and idle ones that sleep until a
// message comes instead of polling.
#pragma once

#include <caf/actor_system_config.hpp>

#include <cstddef>

namespace actorllm::actors {

/// Sets `cfg`'s scheduler to `threads` threads (they run the event-based actors: engine, scheduler, block manager,
/// a worker's control; the model's kernels have a thread pool of their own) whose idle waits leave the CPUs to the
/// kernels. CAF's work-stealing threads, once out of work, spin for a while, then poll their queue every 50 us for
/// 500 polls, and only then wait on a condition variable that a new message signals. A decode step sends them a few
/// messages every few tens of milliseconds, so they never got past the 50 us polls: on a 2-vCPU machine each woke
/// about 4,300 times a second and took the cores from the kernels' threads (about 4,000 involuntary switches a
/// second each), and a batch-1 decode step of a 1.1B model through actorllm::LLM took 66-71 ms where the same
/// forward pass alone takes 54-60. Without the polling phase an idle thread goes from spinning straight to the
/// condition variable: 57-58 ms (bench_engine_overhead, TinyLlama-1.1B shape, 2 threads; docs/cpu-speed-log.md,
/// session 49).
void configure_caf_scheduler(caf::actor_system_config& cfg, size_t threads);

}  // namespace actorllm::actors
