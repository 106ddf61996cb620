// SHA-256 through libcrypto.
#include "util/sha256.hpp"

#include <openssl/sha.h>

namespace actorllm::util {

sha256_digest sha256(std::span<const uint8_t> bytes) {
  sha256_digest digest{};
  SHA256(bytes.data(), bytes.size(), digest.data());
  return digest;
}

sha256_digest sha256(std::string_view text) {
  return sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::string to_hex(const sha256_digest& digest) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(digest.size() * 2);
  for (uint8_t b : digest) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 0xf]);
  }
  return out;
}

}  // namespace actorllm::util
