// The server's LoRA adapters.
#include "net/lora_service.hpp"

#include "net/openai/requests.hpp"

#include <simdjson.h>

#include <algorithm>

namespace actorllm::net {

namespace {

using openai::api_error;

/// A string field of a JSON object body, or the error naming it.
openai::result<std::string> string_field(simdjson::dom::element doc, const char* key) {
  std::string_view v;
  if (doc[key].get_string().get(v) != simdjson::SUCCESS || v.empty())
    return api_error::bad_request(std::string{key} + " must be a non-empty string", key);
  return std::string{v};
}

std::shared_ptr<response_channel> fail(const api_error& e) { return reply(error_response(e)); }

std::shared_ptr<response_channel> text_reply(std::string text) {
  http_response r;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  return reply(std::move(r));
}

}  // namespace

openai::result<lora_module> parse_lora_module(std::string_view value, const std::vector<std::string>& served_names) {
  lora_module m;
  if (!value.empty() && value.front() == '{') {
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (parser.parse(value.data(), value.size()).get(doc) != simdjson::SUCCESS || !doc.is_object())
      return api_error::bad_request("--lora-modules: '" + std::string{value} + "' is not a JSON object");
    simdjson::dom::object fields;
    if (doc.get_object().get(fields) != simdjson::SUCCESS)
      return api_error::bad_request("--lora-modules: '" + std::string{value} + "' is not a JSON object");
    for (auto [key, v] : fields) {
      std::string_view s;
      if (v.get_string().get(s) != simdjson::SUCCESS)
        return api_error::bad_request("--lora-modules: '" + std::string{key} + "' must be a string");
      if (key == "name")
        m.name = s;
      else if (key == "path")
        m.path = s;
      else if (key == "base_model_name") {
        if (std::find(served_names.begin(), served_names.end(), s) == served_names.end())
          return api_error::bad_request("--lora-modules: base_model_name '" + std::string{s} +
                                        "' is not a served model name");
      } else {
        return api_error::bad_request("--lora-modules: unknown key '" + std::string{key} +
                                      "' (name, path, base_model_name)");
      }
    }
  } else if (auto eq = value.find('='); eq != std::string_view::npos) {
    m.name = value.substr(0, eq);
    m.path = value.substr(eq + 1);
  } else {
    return api_error::bad_request("--lora-modules: '" + std::string{value} +
                                  "' is neither name=path nor a JSON object with name and path");
  }
  if (m.name.empty() || m.path.empty())
    return api_error::bad_request("--lora-modules: '" + std::string{value} + "' needs a name and a path");
  return m;
}

openai::result<lora_request> lora_service::add(const lora_module& module) {
  if (!enabled_)
    return api_error::bad_request("LoRA adapters need the server started with --enable-lora", "lora_name");
  {
    std::lock_guard lock{mutex_};
    if (std::find(served_names_.begin(), served_names_.end(), module.name) != served_names_.end() ||
        std::any_of(adapters_.begin(), adapters_.end(), [&](const lora_request& l) { return l.name == module.name; }))
      return api_error::bad_request("The lora adapter '" + module.name + "' has already been loaded.", "lora_name");
  }
  lora_request lora;
  lora.name = module.name;
  lora.path = module.path;
  {
    std::lock_guard lock{mutex_};
    lora.id = next_id_++;  // never reused: the engine knows an id by its path for good
  }
  if (auto bad = llm_.add_lora(lora))
    return api_error::bad_request(bad->what(), "lora_path");
  std::lock_guard lock{mutex_};
  if (std::any_of(adapters_.begin(), adapters_.end(), [&](const lora_request& l) { return l.name == module.name; }))
    return api_error::bad_request("The lora adapter '" + module.name + "' has already been loaded.", "lora_name");
  adapters_.push_back(lora);
  return lora;
}

openai::result<lora_request> lora_service::remove(std::string_view name) {
  if (!enabled_)
    return api_error::bad_request("LoRA adapters need the server started with --enable-lora", "lora_name");
  std::lock_guard lock{mutex_};
  auto it = std::find_if(adapters_.begin(), adapters_.end(), [&](const lora_request& l) { return l.name == name; });
  if (it == adapters_.end())
    return api_error::not_found("The lora adapter '" + std::string{name} + "' cannot be found.", "lora_name");
  lora_request removed = std::move(*it);
  adapters_.erase(it);
  return removed;
}

openai::result<resolved_model> lora_service::resolve(std::string_view requested) const {
  auto base = openai::resolve_model(requested, served_names_);
  if (base)
    return resolved_model{std::move(*base), std::nullopt};
  std::lock_guard lock{mutex_};
  for (const lora_request& l : adapters_)
    if (l.name == requested)
      return resolved_model{l.name, l};
  return base.error();
}

std::vector<openai::model_card> lora_service::cards(int64_t created, int32_t max_model_len) const {
  std::vector<openai::model_card> out;
  std::lock_guard lock{mutex_};
  for (const lora_request& l : adapters_) {
    out.push_back({l.name, created, "actorllm", l.path, max_model_len,
                   served_names_.empty() ? std::string{} : served_names_.front()});
  }
  return out;
}

void lora_service::install(router& r) {
  r.add("POST", "/v1/load_lora_adapter", [this](const http_request& q) { return load(q); });
  r.add("POST", "/v1/unload_lora_adapter", [this](const http_request& q) { return unload(q); });
}

std::shared_ptr<response_channel> lora_service::load(const http_request& req) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(req.body).get(doc) != simdjson::SUCCESS || !doc.is_object())
    return fail(api_error::bad_request("the body must be a JSON object"));
  auto name = string_field(doc, "lora_name");
  if (!name)
    return fail(name.error());
  auto path = string_field(doc, "lora_path");
  if (!path)
    return fail(path.error());
  auto added = add({*name, *path});
  if (!added)
    return fail(added.error());
  return text_reply("Success: LoRA adapter '" + *name + "' added successfully.");
}

std::shared_ptr<response_channel> lora_service::unload(const http_request& req) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(req.body).get(doc) != simdjson::SUCCESS || !doc.is_object())
    return fail(api_error::bad_request("the body must be a JSON object"));
  auto name = string_field(doc, "lora_name");
  if (!name)
    return fail(name.error());
  auto removed = remove(*name);
  if (!removed)
    return fail(removed.error());
  return text_reply("Success: LoRA adapter '" + *name + "' removed successfully.");
}

}  // namespace actorllm::net
