// The check of a request's LoRA adapter.
#include "api/lora_check.hpp"

#include "model/lora_adapter.hpp"

#include <fmt/format.h>

namespace actorllm::detail {

std::string lora_check::problem(const lora_request& lora) {
  if (!config_.enable_lora)
    return fmt::format("LoRA adapter '{}': this engine runs without LoRA (start it with enable_lora / --enable-lora)",
                       lora.name);
  if (lora.id <= 0)
    return fmt::format("LoRA adapter '{}': its id must be positive, got {}", lora.name, lora.id);
  if (lora.path.empty())
    return fmt::format("LoRA adapter '{}': no path given", lora.name);
  {
    std::lock_guard lock{mutex_};
    if (auto it = accepted_.find(lora.id); it != accepted_.end()) {
      if (it->second == lora.path)
        return {};
      return fmt::format("LoRA adapter '{}': id {} already names the adapter at {} (one id, one adapter)", lora.name,
                         lora.id, it->second);
    }
  }
  try {
    (void)model::inspect_lora_adapter(lora.path, model_, config_.max_lora_rank);
  } catch (const std::exception& e) {
    return fmt::format("LoRA adapter '{}': {}", lora.name, e.what());
  }
  std::lock_guard lock{mutex_};
  accepted_.emplace(lora.id, lora.path);
  return {};
}

}  // namespace actorllm::detail
