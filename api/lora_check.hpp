// The check a request's LoRA adapter passes before the engine takes it: LoRA on, a usable id, and a PEFT directory
// that fits the model (model/lora_adapter.hpp), so that a shard never meets an adapter it cannot load. An id keeps
// the path it was first checked with, since the prefix cache and the shards' slots know adapters by id.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/lora_request.hpp"
#include "model/model_config.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace actorllm::detail {

/// The adapters one engine accepted, by id.
class lora_check {
 public:
  lora_check(const engine_config& config, const model::model_config& model) : config_(config), model_(model) {}

  /// Empty when requests may run with `lora`; otherwise why not, naming the adapter.
  std::string problem(const lora_request& lora);

 private:
  engine_config config_;
  model::model_config model_;
  std::mutex mutex_;
  std::map<int32_t, std::string> accepted_;  // id -> path, for the engine's lifetime
};

}  // namespace actorllm::detail
