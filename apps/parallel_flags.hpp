// The context-parallel flags `serve` and `generate` share (vLLM's names).
#pragma once

#include <CLI/CLI.hpp>

namespace actorllm::app {

/// --decode-context-parallel-size (-dcp, an alias registered with the others), --dcp-kv-cache-interleave-size
/// (also vLLM's later --cp-kv-cache-interleave-size) and --prefill-context-parallel-size (-pcp): engine_config's
/// fields of the same names.
inline void add_context_parallel_flags(CLI::App& sub, int& dcp_size, int& interleave, int& pcp_size) {
  sub.add_option("--prefill-context-parallel-size", pcp_size,
                 "Prefill context parallelism (also -pcp): copies of each stage's TP group (tp x pp x pcp ranks) "
                 "split every step's rows and share the KV cache by positions")
      ->capture_default_str();
  sub.add_option("--decode-context-parallel-size", dcp_size,
                 "Decode context parallelism (also -dcp): TP ranks that would each hold a copy of one kv head's "
                 "cache split it by positions in groups of this size (a divisor of tp / num_key_value_heads); the "
                 "KV capacity in tokens grows by it")
      ->capture_default_str();
  sub.add_option("--dcp-kv-cache-interleave-size,--cp-kv-cache-interleave-size", interleave,
                 "Positions a decode-context-parallel rank keeps in a row before the next rank's run (divides "
                 "--block-size)")
      ->capture_default_str();
}

}  // namespace actorllm::app
