// Settings from the environment: see hub_settings.hpp.
#include "hub/hub_settings.hpp"

#include "hub/hub_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace actorllm::hub {
namespace {

namespace fs = std::filesystem;

// huggingface_hub's _is_true.
bool truthy(const std::optional<std::string>& value) {
  if (!value)
    return false;
  std::string v = *value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

fs::path expand_home(const std::string& path, const env_lookup& env) {
  if (path == "~" || path.starts_with("~/")) {
    const auto home = env("HOME");
    if (home)
      return fs::path{*home} / path.substr(std::min<std::size_t>(path.size(), 2));
  }
  return fs::path{path};
}

fs::path hf_home(const env_lookup& env) {
  if (const auto home = env("HF_HOME"))
    return expand_home(*home, env);
  if (const auto xdg = env("XDG_CACHE_HOME"))
    return expand_home(*xdg, env) / "huggingface";
  const auto home = env("HOME");
  return fs::path{home.value_or("/root")} / ".cache" / "huggingface";
}

}  // namespace

std::optional<std::string> process_environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0')
    return std::nullopt;
  return std::string{value};
}

hub_settings hub_settings_from_environment(const std::string& download_dir, const env_lookup& env) {
  hub_settings s;
  if (!download_dir.empty())
    s.cache_dir = expand_home(download_dir, env);
  else if (const auto cache = env("HF_HUB_CACHE"))
    s.cache_dir = expand_home(*cache, env);
  else if (const auto legacy_cache = env("HUGGINGFACE_HUB_CACHE"))
    s.cache_dir = expand_home(*legacy_cache, env);
  else
    s.cache_dir = hf_home(env) / "hub";

  if (const auto endpoint = env("HF_ENDPOINT")) {
    s.endpoint = *endpoint;
    while (s.endpoint.size() > 1 && s.endpoint.back() == '/')
      s.endpoint.pop_back();
  }

  if (const auto token = env("HF_TOKEN")) {
    s.token = trim(*token);
    s.token_source = "HF_TOKEN";
  } else if (const auto legacy = env("HUGGING_FACE_HUB_TOKEN")) {
    s.token = trim(*legacy);
    s.token_source = "HUGGING_FACE_HUB_TOKEN";
  } else {
    const fs::path file = env("HF_TOKEN_PATH") ? expand_home(*env("HF_TOKEN_PATH"), env) : hf_home(env) / "token";
    std::ifstream in{file};
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      s.token = trim(text.str());
      if (!s.token.empty())
        s.token_source = file.string();
    }
  }

  for (const char* name : {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}) {
    const auto value = env(name);
    if (truthy(value)) {
      s.offline = true;
      s.offline_source = fmt::format("{}={}", name, *value);
      break;
    }
  }

  if (const auto bundle = env("REQUESTS_CA_BUNDLE"))
    s.ca_file = expand_home(*bundle, env).string();
  else if (const auto curl_bundle = env("CURL_CA_BUNDLE"))
    s.ca_file = expand_home(*curl_bundle, env).string();

  if (const auto timeout = env("HF_HUB_DOWNLOAD_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(timeout->c_str(), &end);
    if (end == timeout->c_str() || *end != '\0' || !(seconds > 0))
      throw hub_error(fmt::format("HF_HUB_DOWNLOAD_TIMEOUT={}: not a positive number of seconds", *timeout));
    s.timeout = std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000)};
  }
  return s;
}

}  // namespace actorllm::hub
