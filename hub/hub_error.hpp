// The one exception of the Hub module: what keeps a model name from resolving to a directory (a repo that does not
// exist, a gated one, a file missing offline, a download refused by its checksum), with a message that names the
// repository, the revision, the file and the cache path involved. Callers show it as is.
#pragma once

#include <stdexcept>

namespace actorllm::hub {

/// A model or tokenizer that cannot be resolved or downloaded; what() is the whole explanation.
struct hub_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace actorllm::hub
