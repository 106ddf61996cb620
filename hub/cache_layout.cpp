// The cache layout: see cache_layout.hpp.
#include "hub/cache_layout.hpp"

#include "hub/hub_error.hpp"
#include "hub/repo_id.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace actorllm::hub {
namespace {

namespace fs = std::filesystem;

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

repo_cache::repo_cache(fs::path cache_dir, std::string repo)
    : cache_dir_(std::move(cache_dir)), repo_(std::move(repo)), repo_dir_(cache_dir_ / repo_folder_name(repo_)) {}

fs::path repo_cache::blob_path(std::string_view etag) const { return repo_dir_ / "blobs" / std::string{etag}; }

fs::path repo_cache::incomplete_path(std::string_view etag) const {
  return repo_dir_ / "blobs" / (std::string{etag} + ".incomplete");
}

fs::path repo_cache::lock_path(std::string_view etag) const {
  return cache_dir_ / ".locks" / repo_folder_name(repo_) / (std::string{etag} + ".lock");
}

fs::path repo_cache::ref_path(std::string_view revision) const { return repo_dir_ / "refs" / std::string{revision}; }

fs::path repo_cache::snapshot_dir(std::string_view commit) const {
  return repo_dir_ / "snapshots" / std::string{commit};
}

std::optional<std::string> repo_cache::commit_of(std::string_view revision) const {
  if (is_commit_hash(revision))
    return std::string{revision};
  if (!is_valid_revision(revision))
    return std::nullopt;
  std::ifstream in{ref_path(revision)};
  if (!in)
    return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  std::string commit = trim(text.str());
  if (!is_commit_hash(commit))
    return std::nullopt;
  return commit;
}

void repo_cache::write_ref(std::string_view revision, std::string_view commit) const {
  if (revision == commit)
    return;
  const fs::path path = ref_path(revision);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path temp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out{temp, std::ios::binary | std::ios::trunc};
    out << commit;
    if (!out)
      throw hub_error(fmt::format("cannot write {}: {}", temp.string(), std::strerror(errno)));
  }
  fs::rename(temp, path, ec);
  if (ec)
    throw hub_error(fmt::format("cannot write {}: {}", path.string(), ec.message()));
}

bool repo_cache::has_file(std::string_view commit, std::string_view file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_dir(commit) / std::string{file}, ec);  // follows the symlink
}

void repo_cache::link_file(std::string_view commit, std::string_view file, std::string_view etag) const {
  const fs::path link = snapshot_dir(commit) / std::string{file};
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec)
    throw hub_error(fmt::format("cannot create {}: {}", link.parent_path().string(), ec.message()));
  const fs::path target = blob_path(etag).lexically_relative(link.parent_path());
  // A new link under a temporary name, renamed over the old one: a reader never finds the name missing.
  const fs::path temp = link.string() + fmt::format(".link{}", ::getpid());
  fs::remove(temp, ec);
  fs::create_symlink(target, temp, ec);
  if (!ec)
    fs::rename(temp, link, ec);
  if (ec)
    throw hub_error(fmt::format("cannot link {} to {}: {}", link.string(), blob_path(etag).string(), ec.message()));
}

file_lock::file_lock(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw hub_error(fmt::format("cannot open the lock file {}: {}", path.string(), std::strerror(errno)));
  int rc = 0;
  do {
    rc = ::flock(fd_, LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd_);
    throw hub_error(fmt::format("cannot lock {}: {}", path.string(), std::strerror(err)));
  }
}

file_lock::~file_lock() {
  if (fd_ >= 0)
    ::close(fd_);  // releases the flock
}

}  // namespace actorllm::hub
