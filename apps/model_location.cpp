// Model and tokenizer names to directories: see model_location.hpp.
#include "apps/model_location.hpp"

#include "hub/model_resolver.hpp"
#include "util/log.hpp"

#include <filesystem>
#include <optional>

namespace actorllm::app {

model_location resolve_model_location(const model_location_request& request) {
  // The Hub's settings are read only for a name that is not a directory: a local model never depends on HF_*.
  std::optional<hub::hub_settings> settings;
  const auto resolve = [&](const std::string& name, const std::string& revision, const hub::wanted_files& wanted) {
    std::error_code ec;
    if (std::filesystem::is_directory(name, ec))
      return name;
    if (!settings)
      settings = hub::hub_settings_from_environment(request.download_dir);
    const std::string dir = hub::resolve_model_path(name, revision, wanted, *settings).string();
    log::info("hub", "{} is {}", name, dir);
    return dir;
  };
  model_location out;
  out.model_dir = resolve(request.model, request.revision,
                          {.config = true,
                           .weights = request.load_weights,
                           .tokenizer = request.tokenizer_needed && request.tokenizer.empty()});
  if (!request.tokenizer.empty())
    out.tokenizer_dir =
        resolve(request.tokenizer, request.tokenizer_revision.empty() ? request.revision : request.tokenizer_revision,
                {.config = false, .weights = false, .tokenizer = true});
  return out;
}

}  // namespace actorllm::app
