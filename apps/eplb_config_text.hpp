// vLLM's --eplb-config: expert-parallel load balancing's settings as a JSON object ('{"window_size": 1000,
// "step_interval": 3000, "num_redundant_experts": 0, "log_balancedness": false}'), read into engine_config::eplb by
// the command line and by a --config file (which may also write them as a TOML table).
#pragma once

#include "actorllm/engine_config.hpp"

#include <string>
#include <string_view>

namespace actorllm::app {

/// The keys --eplb-config takes, in vLLM's spelling.
inline constexpr std::string_view eplb_config_keys =
    "window_size, step_interval, num_redundant_experts, "
    "log_balancedness";

/// Sets `key` of `out` from an integer or a boolean; returns why not (an unknown key, the wrong type, a value out of
/// range: "window_size must be at least 1, got 0"), or "" when it took it. `is_bool` says which of the two the value
/// is; `number` holds it (0 or 1 for a boolean).
std::string set_eplb_key(eplb_config& out, std::string_view key, bool is_bool, int64_t number);

/// Reads the JSON object `text` into `out` (keys it does not name keep their values); returns why not, naming the
/// key, or "" when it took it.
std::string parse_eplb_config(std::string_view text, eplb_config& out);

}  // namespace actorllm::app
