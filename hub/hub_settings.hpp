// Where the Hugging Face cache is, which Hub to ask, with which token, and whether the network may be used at all:
// read from the environment variables huggingface_hub reads, so a cache filled by `huggingface-cli download` or by
// vLLM is found, and one filled here is theirs too.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace actorllm::hub {

/// Looks an environment variable up; nullopt when unset.
using env_lookup = std::function<std::optional<std::string>(const char* name)>;

/// The process environment (std::getenv; an empty value counts as unset).
std::optional<std::string> process_environment(const char* name);

/// Everything the resolver needs besides the repo and revision.
struct hub_settings {
  std::filesystem::path cache_dir;                  ///< holds models--{org}--{name}/
  std::string endpoint = "https://huggingface.co";  ///< HF_ENDPOINT, without a trailing '/'
  std::string token;                         ///< sent as a bearer token to the endpoint's origin only; empty: none
  std::string token_source;                  ///< where the token came from ("HF_TOKEN", a file), for messages
  bool offline = false;                      ///< never touch the network
  std::string offline_source;                ///< "HF_HUB_OFFLINE=1", for messages
  std::chrono::milliseconds timeout{10000};  ///< how long a connect or a read may wait for the server
  std::string ca_file;  ///< PEM bundle of the CAs to trust instead of the system's store; empty: the system's
};

/// huggingface_hub's rules: the cache is `download_dir` when given (vLLM's --download-dir), else $HF_HUB_CACHE (or the
/// older $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
/// ~/.cache/huggingface/hub; the endpoint $HF_ENDPOINT; the token $HF_TOKEN, else the file $HF_TOKEN_PATH, else
/// $HF_HOME/token (what `huggingface-cli login` writes); offline when $HF_HUB_OFFLINE or $TRANSFORMERS_OFFLINE is
/// 1/true/yes/on; the timeout $HF_HUB_DOWNLOAD_TIMEOUT seconds (default 10); the CA bundle $REQUESTS_CA_BUNDLE, else
/// $CURL_CA_BUNDLE (what huggingface_hub's requests reads; $SSL_CERT_FILE and $SSL_CERT_DIR also work, through
/// OpenSSL's default store).
hub_settings hub_settings_from_environment(const std::string& download_dir = {},
                                           const env_lookup& env = process_environment);

}  // namespace actorllm::hub
