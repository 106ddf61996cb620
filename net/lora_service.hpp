// The server's LoRA adapters (vLLM's --lora-modules, /v1/load_lora_adapter and /v1/unload_lora_adapter): each
// adapter is served under its own model name, which a request's `model` picks; /v1/models lists them with the base
// model as their parent. Adapters are checked against the model (LLM::add_lora) before they are listed.
#pragma once

#include "actorllm/llm.hpp"
#include "actorllm/lora_request.hpp"
#include "net/openai/api_error.hpp"
#include "net/openai/responses.hpp"
#include "net/routes.hpp"

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::net {

/// One --lora-modules entry.
struct lora_module {
  std::string name;
  std::string path;
};

/// Parses a --lora-modules value as vLLM does: `name=path`, or a JSON object {"name": ..., "path": ...,
/// "base_model_name": ...} (base_model_name, when given, must be one of `served_names`). The error names what is
/// wrong.
openai::result<lora_module> parse_lora_module(std::string_view value, const std::vector<std::string>& served_names);

/// A request's `model`: a served name of the base model, or an adapter's.
struct resolved_model {
  std::string name;
  std::optional<lora_request> lora;
};

/// The adapters one server serves.
class lora_service {
 public:
  /// `enabled`: --enable-lora (without it every adapter route answers 400 naming the flag).
  lora_service(LLM& llm, bool enabled, std::vector<std::string> served_names)
      : llm_(llm), enabled_(enabled), served_names_(std::move(served_names)) {}

  /// Adds an adapter under `name` (the next id), checked against the model; an error (400) when LoRA is off, the
  /// name is taken (a served name or another adapter) or the adapter does not fit the model.
  openai::result<lora_request> add(const lora_module& module);
  /// Removes the adapter called `name`; 404 when there is none.
  openai::result<lora_request> remove(std::string_view name);
  /// The base model (empty `requested`: the first served name) or an adapter; 404 naming the model otherwise.
  openai::result<resolved_model> resolve(std::string_view requested) const;
  /// The adapters' cards for /v1/models (parent: the first served name).
  std::vector<openai::model_card> cards(int64_t created, int32_t max_model_len) const;

  /// POST /v1/load_lora_adapter {"lora_name", "lora_path"} and POST /v1/unload_lora_adapter {"lora_name"}: 200 with
  /// vLLM's plain-text success message, or an OpenAI error.
  void install(router& r);

 private:
  std::shared_ptr<response_channel> load(const http_request& req);
  std::shared_ptr<response_channel> unload(const http_request& req);

  LLM& llm_;
  bool enabled_ = false;
  std::vector<std::string> served_names_;
  mutable std::mutex mutex_;
  std::vector<lora_request> adapters_;
  int32_t next_id_ = 1;
};

}  // namespace actorllm::net
