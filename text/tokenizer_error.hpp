// The one exception type of the tokenizer loaders: thrown only while reading tokenizer.json /
// tokenizer_config.json, with a message that names the file and what is wrong in it.
#pragma once

#include <stdexcept>
#include <string>

namespace actorllm::text {

/// A tokenizer file could not be read or uses something this implementation does not support.
class tokenizer_error : public std::runtime_error {
 public:
  explicit tokenizer_error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace actorllm::text
