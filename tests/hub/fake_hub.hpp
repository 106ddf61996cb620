// A local stand-in for the Hugging Face Hub, for the download tests: the model-info route
// (/api/models/{repo}/revision/{rev}), resolve URLs (/{repo}/resolve/{rev}/{file}, HEAD and GET) that answer an LFS
// file with a redirect to a second listener (the "CDN", another origin, as the real Hub sends LFS files to its
// storage), ETag / X-Linked-Etag / X-Linked-Size headers as the Hub writes them, Range requests, gated repos, and
// misbehaviours on demand (wrong bytes, a transfer cut short). Both listeners are on 127.0.0.1, served by one
// thread that the destructor stops. Every request is recorded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::test {

/// One file of a commit.
struct fake_hub_file {
  std::string bytes;
  bool lfs = false;  ///< served through the CDN redirect, its etag the sha256
};

/// One request as the fake Hub saw it.
struct fake_hub_request {
  std::string server;  ///< "hub" or "cdn"
  std::string method;
  std::string target;
  std::string authorization;  ///< the Authorization header ("" when none)
  std::string range;          ///< the Range header ("" when none)
};

/// A certificate and its key (PEM files) for the Hub listener to speak TLS with.
struct fake_hub_tls {
  std::string certificate_file;
  std::string key_file;
};

class fake_hub {
 public:
  /// `tls`: the Hub listener speaks https with that certificate (the CDN stays plain http).
  explicit fake_hub(std::optional<fake_hub_tls> tls = std::nullopt);
  ~fake_hub();
  fake_hub(const fake_hub&) = delete;
  fake_hub& operator=(const fake_hub&) = delete;

  /// http(s)://127.0.0.1:PORT of the Hub listener (HF_ENDPOINT).
  std::string endpoint() const;
  /// http://127.0.0.1:PORT of the CDN listener.
  std::string cdn() const;

  /// Adds commit `sha` of `repo` with `files`; each name of `refs` ("main", "v1") then points to it.
  void add_commit(const std::string& repo, const std::string& sha, std::map<std::string, fake_hub_file> files,
                  const std::vector<std::string>& refs = {"main"});
  /// Makes `repo` gated: without "Authorization: Bearer `token`" its routes answer 401 (no token) or 403.
  void gate(const std::string& repo, const std::string& token);
  /// The CDN sends the LFS blob with this sha256 with one byte changed (same length).
  void corrupt(const std::string& sha256);
  /// The next `times` CDN transfers of the blob with this sha256 stop after `bytes` bytes of the body (the
  /// connection closes under a Content-Length that promised more).
  void cut_after(const std::string& sha256, std::size_t bytes, int times = 1);

  std::vector<fake_hub_request> requests() const;
  void clear_requests();

  struct state;

 private:
  std::shared_ptr<state> state_;
};

/// The files of a model directory (config.json, tokenizer files, model.safetensors, ...), model.safetensors and
/// any other *.safetensors marked LFS, as a commit's files.
std::map<std::string, fake_hub_file> files_of_directory(const std::filesystem::path& dir);

/// Lowercase hex sha256 of `bytes`.
std::string sha256_hex(const std::string& bytes);

/// The whole content of a file.
std::string read_bytes(const std::filesystem::path& path);

}  // namespace actorllm::test
