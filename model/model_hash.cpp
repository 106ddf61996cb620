// model_content_hash: see model_hash.hpp.
#include "model/model_hash.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <string_view>
#include <system_error>
#include <vector>

namespace actorllm::model {
namespace {

constexpr size_t prefix_bytes = size_t{64} << 10;

class fnv1a64 {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  void add(std::string_view s) {
    add_u64(s.size());  // length-prefixed, so that adjacent fields cannot run into each other
    add(s.data(), s.size());
  }
  void add_u64(uint64_t v) {
    std::array<unsigned char, 8> b{};
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<unsigned char>(v >> (8 * i));
    add(b.data(), b.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

/// Adds up to `limit` bytes of `file`; returns false when it cannot be read.
bool add_file(fnv1a64& h, const std::filesystem::path& file, size_t limit) {
  std::ifstream in{file, std::ios::binary};
  if (!in)
    return false;
  std::vector<char> buffer(std::min(limit, size_t{1} << 16));
  size_t left = limit;
  while (left > 0 && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(std::min(left, buffer.size())));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0)
      break;
    h.add(buffer.data(), got);
    left -= got;
  }
  return true;
}

}  // namespace

std::string model_content_hash(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path config = dir / "config.json";
  if (!fs::is_regular_file(config, ec))
    return "";
  fnv1a64 h;
  if (!add_file(h, config, SIZE_MAX))
    return "";
  std::vector<fs::path> files;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    const auto ext = it->path().extension();
    if ((ext == ".safetensors" || ext == ".json") && it->is_regular_file(ec))
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  for (const auto& file : files) {
    h.add(file.filename().string());
    h.add_u64(static_cast<uint64_t>(fs::file_size(file, ec)));
    add_file(h, file, prefix_bytes);
  }
  return fmt::format("{:016x}", h.value());
}

}  // namespace actorllm::model
