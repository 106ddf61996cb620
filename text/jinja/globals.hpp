// Functions every template can call: Jinja's range(), namespace() and dict(), and the two that Hugging Face
// adds for chat templates, raise_exception(message) and strftime_now(format).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

/// The builtin global functions, by name.
const std::vector<std::pair<std::string, value>>& builtin_globals();

}  // namespace actorllm::text::jinja
