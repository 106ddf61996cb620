// Validation of the scheduler's limits.
#include "engine/scheduler_config.hpp"

#include <fmt/format.h>

namespace actorllm::engine {

std::optional<engine_error> scheduler_config::validate() const {
  auto bad = [](std::string message) { return engine_error{engine_errc::invalid_argument, std::move(message)}; };
  if (max_loras < 0)
    return bad(fmt::format("max_loras must be 0 (LoRA off) or more, got {}", max_loras));
  if (max_num_seqs < 1)
    return bad(fmt::format("max_num_seqs must be at least 1, got {}", max_num_seqs));
  if (max_num_batched_tokens < 1)
    return bad(fmt::format("max_num_batched_tokens must be at least 1, got {}", max_num_batched_tokens));
  if (block_size < 1)
    return bad(fmt::format("block_size must be at least 1, got {}", block_size));
  if (n_blocks < 1)
    return bad(fmt::format("the KV cache needs at least one block, got n_blocks = {}", n_blocks));
  if (max_model_len < 2)
    return bad(
        fmt::format("max_model_len must be at least 2 (one prompt token, one output token), got {}", max_model_len));
  if (pp_size < 1)
    return bad(fmt::format("pp_size must be at least 1, got {}", pp_size));
  return std::nullopt;
}

}  // namespace actorllm::engine
