// vLLM's LoRARequest: which PEFT LoRA adapter a prompt runs with.
#pragma once

#include <cstdint>
#include <string>

namespace actorllm {

/// A LoRA adapter for a request (engine_config::enable_lora): `path` is a PEFT directory (adapter_config.json and
/// adapter_model.safetensors), `id` > 0 names it to the engine (one id, one path, for the engine's lifetime; the
/// prefix cache keys on it), `name` is what messages and the server's model list call it.
struct lora_request {
  std::string name;
  int32_t id = 0;
  std::string path;

  friend bool operator==(const lora_request&, const lora_request&) = default;
};

}  // namespace actorllm
