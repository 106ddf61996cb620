// The one exception type of model/: thrown by the config parser, the safetensors reader and the weight loader,
// caught at their callers' boundary and turned into a message for the user.
#pragma once

#include <stdexcept>

namespace actorllm::model {

/// A model that cannot be served as given: bad config.json, malformed safetensors, missing or misshapen weights,
/// or a parallel layout the model's sizes do not allow. The message names the file and the field or tensor.
struct model_error : std::runtime_error {
  using runtime_error::runtime_error;
};

}  // namespace actorllm::model
