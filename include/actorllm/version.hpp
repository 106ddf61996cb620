// The actorllm release this build is.
#pragma once

#include <string_view>

namespace actorllm {
/// Semantic version of this build, reported by `actorllm --version` and the server's /version.
inline constexpr std::string_view version_string = "0.1.0";
}  // namespace actorllm
