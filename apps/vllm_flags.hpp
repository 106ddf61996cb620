// The flags of `vllm serve` that have no meaning for this engine (or only one value that does), so that a launch
// line copied from vLLM's docs starts: each is accepted and logged once as having no effect, or refused with a
// message that says why when its value asks for something this engine does not do. Flags vLLM does not have either
// stay unknown (with the nearest-name hint, apps/main.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::app {

/// One vLLM flag this engine takes without acting on it.
struct vllm_flag {
  std::string_view name;      ///< "--trust-remote-code"
  bool takes_value = false;   ///< "--swap-space 4" vs "--enforce-eager"
  std::string_view accepted;  ///< comma-separated values that are fine (empty: any); others are an error
  std::string_view why;       ///< why it has no effect here
};

/// Every vLLM serve flag accepted without effect.
std::span<const vllm_flag> vllm_flags_without_effect();

/// vLLM's data-parallel deployment flags this engine refuses by name (--data-parallel-address, -rpc-port,
/// -backend, -start-rank, -hybrid-lb, --headless); a row's accepted values (vLLM's defaults) pass without effect.
std::span<const vllm_flag> vllm_flags_refused();

/// What the command line gave for the flags of vllm_flags_without_effect() and vllm_flags_refused(), filled by
/// CLI11.
struct vllm_flag_values {
  std::vector<std::string> values;  ///< one per table row (a flag without a value: "true" when given)
  std::vector<CLI::Option*> options;
};

/// Adds the flags to `sub` (in their own help group) and returns where CLI11 stores them. The returned object must
/// outlive the parse.
std::shared_ptr<vllm_flag_values> add_vllm_flags(CLI::App& sub);

/// After the parse: throws std::invalid_argument naming the flag when a given value is not an accepted one, or a
/// refused flag was given; logs one line per given flag saying it has no effect.
void report_vllm_flags(const vllm_flag_values& given);

}  // namespace actorllm::app
