// One repository's folder in a Hugging Face cache, in the layout huggingface_hub writes and reads:
//
//   {cache}/models--{org}--{name}/refs/{revision}          the commit hash a branch or tag pointed to
//   {cache}/models--{org}--{name}/snapshots/{commit}/{file} a relative symlink to ../../blobs/{etag}
//   {cache}/models--{org}--{name}/blobs/{etag}              the bytes (an LFS file's etag is its sha256)
//   {cache}/models--{org}--{name}/blobs/{etag}.incomplete   a download in progress, continued with a Range request
//   {cache}/.locks/models--{org}--{name}/{etag}.lock        held (flock) while that blob is downloaded
//
// Plain file-system logic; no network.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace actorllm::hub {

/// The paths of one repo in one cache, and the few operations on them.
class repo_cache {
 public:
  repo_cache(std::filesystem::path cache_dir, std::string repo);

  const std::filesystem::path& cache_dir() const { return cache_dir_; }
  const std::string& repo() const { return repo_; }
  /// {cache}/models--{org}--{name}
  const std::filesystem::path& repo_dir() const { return repo_dir_; }
  std::filesystem::path blob_path(std::string_view etag) const;
  std::filesystem::path incomplete_path(std::string_view etag) const;
  std::filesystem::path lock_path(std::string_view etag) const;
  std::filesystem::path ref_path(std::string_view revision) const;
  std::filesystem::path snapshot_dir(std::string_view commit) const;

  /// The commit `revision` names here: itself when it is a commit hash, else the hash refs/{revision} holds;
  /// nullopt when the cache does not know it (or the ref holds something that is not a commit hash).
  std::optional<std::string> commit_of(std::string_view revision) const;
  /// Records refs/{revision} = `commit` (a temp file renamed into place); nothing when `revision` is the commit.
  void write_ref(std::string_view revision, std::string_view commit) const;
  /// Whether snapshots/{commit}/{file} exists and reaches a regular file (a broken symlink does not count).
  bool has_file(std::string_view commit, std::string_view file) const;
  /// Makes snapshots/{commit}/{file} a relative symlink to blobs/{etag}, replacing what was there.
  void link_file(std::string_view commit, std::string_view file, std::string_view etag) const;

 private:
  std::filesystem::path cache_dir_;
  std::string repo_;
  std::filesystem::path repo_dir_;
};

/// An exclusive flock(2) on a lock file (created with its folders), released on destruction: the same lock
/// huggingface_hub's filelock takes, so two processes never write one blob at once.
class file_lock {
 public:
  explicit file_lock(const std::filesystem::path& path);
  ~file_lock();
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace actorllm::hub
