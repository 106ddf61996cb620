// Token ids given on the command line ("1,2, 3"), shared by the commands that take them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace actorllm::app {

/// Parses non-negative token ids separated by commas and/or spaces. Throws std::invalid_argument naming `flag` and
/// the offending item for anything else (including an empty list).
std::vector<int32_t> parse_token_id_list(std::string_view list, std::string_view flag);

}  // namespace actorllm::app
