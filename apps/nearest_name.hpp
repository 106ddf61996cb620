// "Did you mean ...?" for misspelt names: the edit distance between two names and the closest of a set of
// candidates. Used for unknown command-line flags (apps/main.cpp) and unknown TOML keys (apps/serve_config_file.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::app {

/// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two neighbouring
/// characters each cost 1 ("paralel" -> "parallel" is 1, "tensor" -> "tesnor" is 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `name` by edit_distance, if it is close enough to be a plausible typo: at most
/// max(2, |name| / 4) edits (ties: the first candidate). Nothing when no candidate is that close.
std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace actorllm::app
