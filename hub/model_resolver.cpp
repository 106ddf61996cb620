// Names to directories, downloading what the cache lacks: see model_resolver.hpp. The decisions live in the plain
// parts (file_selection, download_plan, hub_api, cache_layout); this file strings them together with the HTTP client.
#include "hub/model_resolver.hpp"

#include "hub/cache_layout.hpp"
#include "hub/download_plan.hpp"
#include "hub/http_client.hpp"
#include "hub/hub_api.hpp"
#include "hub/hub_error.hpp"
#include "hub/repo_id.hpp"
#include "hub/url.hpp"
#include "util/file_descriptor.hpp"
#include "util/log.hpp"
#include "util/progress_bar.hpp"
#include "util/sha256.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace actorllm::hub {
namespace {

namespace fs = std::filesystem;

constexpr int max_redirects = 10;
constexpr int max_resumes = 5;

std::string read_file(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool listed(const std::vector<std::string>& siblings, std::string_view name) {
  return std::find(siblings.begin(), siblings.end(), name) != siblings.end();
}

// huggingface_hub's marker of a file known not to exist at a commit: .no_exist/{commit}/{file}.
fs::path no_exist_marker(const repo_cache& cache, std::string_view commit, std::string_view file) {
  return cache.repo_dir() / ".no_exist" / std::string{commit} / std::string{file};
}

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw hub_error(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The start of a 206 answer's "Content-Range: bytes START-END/TOTAL".
std::optional<uint64_t> content_range_start(const std::optional<std::string>& header) {
  if (!header || !header->starts_with("bytes "))
    return std::nullopt;
  uint64_t start = 0;
  std::size_t i = 6;
  if (i >= header->size() || !std::isdigit(static_cast<unsigned char>((*header)[i])))
    return std::nullopt;
  for (; i < header->size() && std::isdigit(static_cast<unsigned char>((*header)[i])); ++i)
    start = start * 10 + static_cast<uint64_t>((*header)[i] - '0');
  return start;
}

class snapshot_downloader {
 public:
  snapshot_downloader(const resolve_request& request, const hub_settings& settings)
      : request_(request),
        settings_(settings),
        cache_(settings.cache_dir, request.repo),
        endpoint_(url::parse(settings.endpoint)),
        client_(settings.timeout, settings.ca_file) {}

  fs::path run() {
    const repo_info info = fetch_repo_info();
    commit_ = info.sha;
    const file_selection selection = select_files(request_.repo, request_.revision, info.siblings, request_.wanted);
    for (const std::string& note : selection.notes)
      log::warning("hub", "{}", note);
    wanted_files complete_when = request_.wanted;
    if (complete_when.tokenizer && !listed(info.siblings, "tokenizer.json")) {
      complete_when.tokenizer = false;
      // Remembered as huggingface_hub does, so an offline start later knows the file is not missing from the cache.
      const fs::path marker = no_exist_marker(cache_, commit_, "tokenizer.json");
      std::error_code ec;
      fs::create_directories(marker.parent_path(), ec);
      std::ofstream{marker};
    }

    std::vector<std::string> files = selection.files;
    if (selection.sharded) {
      const std::string index = "model.safetensors.index.json";
      ensure_files({index});
      const fs::path index_path = cache_.snapshot_dir(commit_) / index;
      for (const std::string& shard :
           index_shards(read_file(index_path),
                        fmt::format("{} of {} at revision {}", index, request_.repo, request_.revision))) {
        if (!listed(info.siblings, shard))
          throw hub_error(fmt::format("{} of {} at revision {} names the shard {}, which the repository does not have",
                                      index, request_.repo, request_.revision, shard));
        files.push_back(shard);
      }
    }
    ensure_files(files);
    cache_.write_ref(request_.revision, commit_);

    const fs::path dir = cache_.snapshot_dir(commit_);
    const std::vector<std::string> missing = missing_files(dir, complete_when);
    if (!missing.empty())
      throw hub_error(fmt::format("{} (revision {}): {} still lacks {} after the download", request_.repo,
                                  request_.revision, dir.string(), fmt::join(missing, ", ")));
    return dir;
  }

 private:
  std::vector<std::pair<std::string, std::string>> auth_for(const url& target) const {
    if (settings_.token.empty() || !target.same_origin(endpoint_))
      return {};  // the token is the Hub's: never sent to a CDN or any other host a redirect names
    return {{"Authorization", "Bearer " + settings_.token}};
  }

  std::string token_source_for(const url& target) const {
    return settings_.token.empty() || !target.same_origin(endpoint_) ? std::string{} : settings_.token_source;
  }

  [[noreturn]] void fail(const http_response& r, const url& target, std::string_view file) const {
    const std::string token_source = token_source_for(target);
    const std::string where = target.str();
    throw hub_error(describe_http_failure(r.status, r.header("x-error-code"), r.header("x-error-message"),
                                          {.repo = request_.repo,
                                           .revision = request_.revision,
                                           .file = file,
                                           .url = where,
                                           .endpoint = settings_.endpoint,
                                           .token_source = token_source}));
  }

  // GET /api/models/{repo}/revision/{revision}, following the Hub's own redirects (a renamed repo).
  repo_info fetch_repo_info() {
    url target = endpoint_.resolve(
        fmt::format("/api/models/{}/revision/{}", request_.repo, percent_encode(request_.revision, false)));
    for (int hop = 0; hop <= max_redirects; ++hop) {
      http_response r;
      try {
        r = client_.send({.method = "GET", .target = target, .headers = auth_for(target)});
      } catch (const hub_error& e) {
        throw hub_error(fmt::format(
            "{} (revision {}): the cache at {} has no complete snapshot of it, and the Hub cannot be asked: {} "
            "(HF_ENDPOINT={}; set HF_HUB_OFFLINE=1 to use the cache alone)",
            request_.repo, request_.revision, cache_.repo_dir().string(), e.what(), settings_.endpoint));
      }
      if (r.status >= 300 && r.status < 400 && r.header("location")) {
        target = target.resolve(*r.header("location"));
        continue;
      }
      if (r.status != 200)
        fail(r, target, "");
      return parse_repo_info(r.body, target.str());
    }
    throw hub_error(fmt::format("{}: more than {} redirects", target.str(), max_redirects));
  }

  // HEAD of the file's resolve URL: its blob name, size, checksum and where its bytes are.
  remote_file head_file(const std::string& name) {
    url target = endpoint_.resolve(
        fmt::format("/{}/resolve/{}/{}", request_.repo, percent_encode(commit_, false), percent_encode(name, true)));
    for (int hop = 0; hop <= max_redirects; ++hop) {
      const http_response r = client_.send({.method = "HEAD", .target = target, .headers = auth_for(target)});
      const auto header = [&r](std::string_view n) { return r.header(n); };
      if (r.status >= 200 && r.status < 300)
        return remote_file_from_head(name, target.str(), r.status, header);
      if (r.status >= 300 && r.status < 400 && r.header("location")) {
        const url next = target.resolve(*r.header("location"));
        // The Hub answers an LFS file with a redirect to its storage, carrying the file's checksum; a redirect
        // within the Hub without one (a renamed repo) is followed.
        if (r.header("x-linked-etag") || !next.same_origin(endpoint_)) {
          remote_file f = remote_file_from_head(name, target.str(), r.status, header);
          f.download_url = next.str();
          return f;
        }
        target = next;
        continue;
      }
      fail(r, target, name);
    }
    throw hub_error(fmt::format("{}: more than {} redirects", target.str(), max_redirects));
  }

  void ensure_files(const std::vector<std::string>& names) {
    download_plan plan;
    for (const std::string& name : names) {
      if (cache_.has_file(commit_, name))
        continue;
      remote_file remote = head_file(name);
      cache_state state;
      std::error_code ec;
      state.blob_present = fs::is_regular_file(cache_.blob_path(remote.etag), ec);
      const auto partial = fs::file_size(cache_.incomplete_path(remote.etag), ec);
      state.partial_bytes = ec ? 0 : partial;
      plan.add(std::move(remote), state);
    }
    if (plan.files().empty())
      return;
    if (plan.downloads() > 0)
      log::info("hub", "Downloading {} file(s) of {} (revision {}, commit {}) from {} into {}", plan.downloads(),
                request_.repo, request_.revision, commit_, settings_.endpoint, cache_.repo_dir().string());
    util::progress_bar bar{fmt::format("Downloading {}", request_.repo)};
    bar.add_total(plan.bytes_to_fetch());
    for (const planned_file& p : plan.files()) {
      if (p.download)
        download_blob(p.remote, bar);
      cache_.link_file(commit_, p.remote.name, p.remote.etag);
    }
    bar.finish_if_complete();
  }

  // Fetches one blob into blobs/{etag}: under its lock, into {etag}.incomplete (continued where an earlier run
  // stopped), checked against its size and checksum, then renamed into place.
  void download_blob(const remote_file& remote, util::progress_bar& bar) {
    file_lock lock{cache_.lock_path(remote.etag)};
    const fs::path blob = cache_.blob_path(remote.etag);
    std::error_code ec;
    if (fs::is_regular_file(blob, ec))
      return;  // another process finished it while this one waited for the lock
    fs::create_directories(blob.parent_path(), ec);
    const fs::path partial = cache_.incomplete_path(remote.etag);
    util::file_descriptor out(::open(partial.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (out.get() < 0)
      throw hub_error(fmt::format("cannot write {}: {}", partial.string(), std::strerror(errno)));
    uint64_t offset = fs::file_size(partial, ec);
    if (ec || (remote.size && offset >= *remote.size && offset > 0)) {
      if (::ftruncate(out.get(), 0) != 0)
        throw hub_error(fmt::format("cannot truncate {}: {}", partial.string(), std::strerror(errno)));
      offset = 0;
    }
    util::sha256_stream hasher;
    if (offset > 0) {
      // The checksum covers the whole file: the bytes kept from before are read back once.
      std::ifstream kept{partial, std::ios::binary};
      std::array<char, 1u << 16> buffer{};
      uint64_t left = offset;
      while (left > 0 && kept) {
        kept.read(buffer.data(), static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size())));
        const auto got = static_cast<uint64_t>(kept.gcount());
        hasher.update({buffer.data(), got});
        left -= got;
      }
      log::info("hub", "{}: continuing the download kept in {} from byte {}", remote.name, partial.string(), offset);
    }

    for (int attempt = 0;; ++attempt) {
      try {
        transfer(remote, out.get(), partial, offset, hasher, bar);
        break;
      } catch (const transfer_interrupted& e) {
        if (attempt >= max_resumes)
          throw hub_error(fmt::format("{} of {}: {}; the {} bytes received are kept in {}: run again to continue",
                                      remote.name, request_.repo, e.what(), offset, partial.string()));
        log::warning("hub", "{}: {}; continuing from byte {}", remote.name, e.what(), offset);
      }
    }
    out.close();

    if (remote.size && offset != *remote.size) {
      fs::remove(partial, ec);
      throw hub_error(
          fmt::format("{} of {} (revision {}): received {} bytes, but the Hub announced {}; the partial "
                      "blob is deleted",
                      remote.name, request_.repo, request_.revision, offset, *remote.size));
    }
    if (!remote.sha256.empty()) {
      const std::string got = util::to_hex(hasher.finish());
      if (got != remote.sha256) {
        fs::remove(partial, ec);
        throw hub_error(fmt::format(
            "{} of {} (revision {}): refused: the downloaded bytes have sha256 {}, but the Hub's checksum is {}; the "
            "blob {} is deleted (run again; a proxy or the connection altered the file)",
            remote.name, request_.repo, request_.revision, got, remote.sha256, partial.string()));
      }
    }
    fs::rename(partial, blob, ec);
    if (ec)
      throw hub_error(fmt::format("cannot move {} to {}: {}", partial.string(), blob.string(), ec.message()));
  }

  // One GET of the file's bytes from `offset` on (following redirects), appended to `fd`.
  void transfer(const remote_file& remote, int fd, const fs::path& partial, uint64_t& offset,
                util::sha256_stream& hasher, util::progress_bar& bar) {
    url target = url::parse(remote.download_url);
    bool range_refused = false;
    for (int hop = 0; hop <= max_redirects; ++hop) {
      std::vector<std::pair<std::string, std::string>> headers = auth_for(target);
      if (offset > 0)
        headers.emplace_back("Range", fmt::format("bytes={}-", offset));
      const auto start_over = [&] {
        if (::ftruncate(fd, 0) != 0)
          throw hub_error(fmt::format("cannot truncate {}: {}", partial.string(), std::strerror(errno)));
        bar.add_total(offset);  // those bytes come again
        hasher.reset();
        offset = 0;
      };
      const auto on_head = [&](const http_response& head) {
        if (head.status == 206) {
          const auto start = content_range_start(head.header("content-range"));
          if (start != offset)
            throw hub_error(fmt::format("{}: asked for the bytes from {} on, the server sent a range starting at {}",
                                        target.str(), offset, start ? std::to_string(*start) : "?"));
        } else if (head.status == 200 && offset > 0) {
          log::info("hub", "{}: the server ignored the Range request: starting over", remote.name);
          start_over();
        }
      };
      const auto sink = [&](std::string_view piece) {
        write_all(fd, piece, partial);
        hasher.update(piece);
        offset += piece.size();
        bar.advance(piece.size());
      };
      const http_response r =
          client_.send({.method = "GET", .target = target, .headers = std::move(headers)}, sink, on_head);
      if (r.status >= 200 && r.status < 300)
        return;
      if (r.status >= 300 && r.status < 400 && r.header("location")) {
        target = target.resolve(*r.header("location"));
        continue;
      }
      if (r.status == 416 && offset > 0 && !range_refused) {
        range_refused = true;  // the kept bytes do not fit what the server has: fetch the whole file again
        start_over();
        --hop;
        continue;
      }
      fail(r, target, remote.name);
    }
    throw hub_error(fmt::format("{}: more than {} redirects", target.str(), max_redirects));
  }

  const resolve_request& request_;
  const hub_settings& settings_;
  repo_cache cache_;
  url endpoint_;
  http_client client_;
  std::string commit_;
};

}  // namespace

fs::path resolve_snapshot(const resolve_request& request, const hub_settings& settings) {
  if (!is_repo_id(request.repo))
    throw hub_error(fmt::format("'{}' is not a Hugging Face repo id (org/name)", request.repo));
  if (!is_valid_revision(request.revision))
    throw hub_error(fmt::format("{}: '{}' is not a usable revision (a branch, tag or commit hash)", request.repo,
                                request.revision));
  const repo_cache cache{settings.cache_dir, request.repo};
  if (const auto commit = cache.commit_of(request.revision)) {
    const fs::path dir = cache.snapshot_dir(*commit);
    std::vector<std::string> missing = missing_files(dir, request.wanted);
    std::error_code ec;
    std::erase_if(missing, [&](const std::string& file) {
      return fs::exists(no_exist_marker(cache, *commit, file), ec);  // known not to be in the repo
    });
    if (missing.empty()) {
      log::info("hub", "{} (revision {}): using the cached snapshot {}", request.repo, request.revision, dir.string());
      return dir;
    }
    if (settings.offline)
      throw hub_error(fmt::format(
          "{}: {} (revision {}, commit {}) is incomplete in the cache: {} missing from {} (download it once "
          "without offline mode, or point --download-dir / HF_HUB_CACHE at a cache that has it)",
          settings.offline_source, request.repo, request.revision, *commit, fmt::join(missing, ", "), dir.string()));
  } else if (settings.offline) {
    throw hub_error(
        fmt::format("{}: {} (revision {}) is not in the cache: no {} (download it once without offline mode, or point "
                    "--download-dir / HF_HUB_CACHE at a cache that has it)",
                    settings.offline_source, request.repo, request.revision,
                    is_commit_hash(request.revision) ? cache.snapshot_dir(request.revision).string()
                                                     : cache.ref_path(request.revision).string()));
  }
  return snapshot_downloader{request, settings}.run();
}

fs::path resolve_model_path(const std::string& name, const std::string& revision, const wanted_files& wanted,
                            const hub_settings& settings) {
  std::error_code ec;
  if (fs::is_directory(name, ec))
    return fs::path{name};
  if (fs::exists(name, ec))
    throw hub_error(fmt::format("{} is a file: give the directory that holds config.json", name));
  if (!is_repo_id(name))
    throw hub_error(fmt::format("{}: no such directory, and not a Hugging Face repo id (org/name)", name));
  return resolve_snapshot({.repo = name, .revision = revision.empty() ? "main" : revision, .wanted = wanted}, settings);
}

}  // namespace actorllm::hub
