// The download plan: see download_plan.hpp.
#include "hub/download_plan.hpp"

#include "hub/hub_error.hpp"

#include <fmt/format.h>

#include <charconv>

namespace actorllm::hub {
namespace {

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

std::optional<uint64_t> parse_size(const std::optional<std::string>& text) {
  if (!text)
    return std::nullopt;
  uint64_t v = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, v);
  if (ec != std::errc{} || ptr != end)
    return std::nullopt;
  return v;
}

}  // namespace

std::string normalize_etag(std::string_view etag) {
  if (etag.starts_with("W/"))
    etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
    etag = etag.substr(1, etag.size() - 2);
  return std::string{etag};
}

bool is_safe_etag(std::string_view etag) {
  if (etag.empty() || etag.size() > 255 || etag.front() == '.')
    return false;
  for (char c : etag)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_' ||
          c == '.'))
      return false;
  return true;
}

remote_file remote_file_from_head(std::string_view name, std::string_view resolve_url, int status,
                                  const std::function<std::optional<std::string>(std::string_view)>& header) {
  remote_file f;
  f.name = std::string{name};
  const auto linked = header("x-linked-etag");
  const auto etag = linked ? linked : header("etag");
  if (!etag)
    throw hub_error(fmt::format(
        "{}: the server sent no ETag for {} (is HF_ENDPOINT a Hugging Face Hub? a proxy may be rewriting answers)",
        resolve_url, name));
  f.etag = normalize_etag(*etag);
  if (!is_safe_etag(f.etag))
    throw hub_error(fmt::format("{}: the server sent the ETag '{}' for {}, which cannot name a cache file", resolve_url,
                                *etag, name));
  if (is_sha256_hex(f.etag))
    f.sha256 = f.etag;
  f.size = parse_size(header("x-linked-size"));
  if (!f.size)
    f.size = parse_size(header("content-length"));
  if (status >= 300 && status < 400) {
    const auto location = header("location");
    if (!location)
      throw hub_error(fmt::format("{}: a redirect ({}) without a Location for {}", resolve_url, status, name));
    f.download_url = *location;  // resolved against resolve_url by the caller, which knows how to parse URLs
  } else {
    f.download_url = std::string{resolve_url};
  }
  return f;
}

void download_plan::add(remote_file remote, const cache_state& state) {
  planned_file p;
  p.download = !state.blob_present;
  // Two names of one blob (identical shards, a file under two paths): fetched once, the second only linked.
  for (const planned_file& earlier : files_)
    if (earlier.download && earlier.remote.etag == remote.etag)
      p.download = false;
  if (p.download && state.partial_bytes > 0 && (!remote.size || state.partial_bytes < *remote.size))
    p.resume_from = state.partial_bytes;
  p.remote = std::move(remote);
  files_.push_back(std::move(p));
}

uint64_t download_plan::bytes_to_fetch() const {
  uint64_t total = 0;
  for (const planned_file& p : files_)
    if (p.download && p.remote.size)
      total += *p.remote.size - p.resume_from;
  return total;
}

std::size_t download_plan::downloads() const {
  std::size_t n = 0;
  for (const planned_file& p : files_)
    n += p.download ? 1 : 0;
  return n;
}

}  // namespace actorllm::hub
