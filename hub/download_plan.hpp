// The download of a snapshot as plain data: what the Hub said about each file (its blob name, size, checksum and
// where its bytes are), what the cache already holds of it, and so what is left to do: link a blob that is already
// there, continue an .incomplete one with a Range request, or fetch it whole. No I/O here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::hub {

/// One file as the Hub describes it (the answer to a HEAD of its resolve URL).
struct remote_file {
  std::string name;              ///< path in the repo ("config.json")
  std::string etag;              ///< the blob's name: X-Linked-Etag (an LFS file's sha256), else ETag, unquoted
  std::optional<uint64_t> size;  ///< X-Linked-Size, else Content-Length
  std::string sha256;            ///< the digest the bytes must have (the etag when it is a sha256), empty: none known
  std::string download_url;      ///< where the bytes are: the redirect's target for an LFS file, else the resolve URL
};

/// An ETag as a blob name: the W/ prefix and the quotes removed.
std::string normalize_etag(std::string_view etag);

/// Whether `etag` is usable as a file name in blobs/ (letters, digits, '-', '_', '.', not starting with '.').
bool is_safe_etag(std::string_view etag);

/// Reads a remote_file out of a HEAD answer: `status` (200, or a redirect for an LFS file), its headers through
/// `header` (case-insensitive lookup), `resolve_url` the URL asked. Throws hub_error naming the file when the
/// answer carries no usable ETag or a redirect has no Location.
remote_file remote_file_from_head(std::string_view name, std::string_view resolve_url, int status,
                                  const std::function<std::optional<std::string>(std::string_view)>& header);

/// What the cache holds of one blob.
struct cache_state {
  bool blob_present = false;   ///< blobs/{etag} exists: only the snapshot link is missing
  uint64_t partial_bytes = 0;  ///< size of blobs/{etag}.incomplete (0: none)
};

/// What is to be done for one file.
struct planned_file {
  remote_file remote;
  bool download = true;      ///< false: the blob is there, link it
  uint64_t resume_from = 0;  ///< bytes of the .incomplete blob kept (a Range request continues after them)
};

/// The files of one snapshot still to be fetched or linked, in order.
class download_plan {
 public:
  /// Adds a file; an .incomplete blob at least as long as the file's size is not trusted and fetched again, and a
  /// blob an earlier file of the plan already fetches is only linked.
  void add(remote_file remote, const cache_state& state);

  const std::vector<planned_file>& files() const { return files_; }
  /// Bytes still to transfer (sizes the Hub did not give count as 0).
  uint64_t bytes_to_fetch() const;
  /// Files to transfer (not only link).
  std::size_t downloads() const;

 private:
  std::vector<planned_file> files_;
};

}  // namespace actorllm::hub
