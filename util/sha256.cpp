// SHA-256 through libcrypto.
#include "util/sha256.hpp"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <new>

namespace actorllm::util {

sha256_digest sha256(std::span<const uint8_t> bytes) {
  sha256_digest digest{};
  SHA256(bytes.data(), bytes.size(), digest.data());
  return digest;
}

sha256_digest sha256(std::string_view text) {
  return sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

sha256_stream::sha256_stream() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr)
    throw std::bad_alloc{};
  reset();
}

sha256_stream::~sha256_stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void sha256_stream::update(std::string_view bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

sha256_digest sha256_stream::finish() {
  sha256_digest digest{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest.data(), &n);
  reset();
  return digest;
}

void sha256_stream::reset() { EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr); }

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
