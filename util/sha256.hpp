// SHA-256 (FIPS 180-4) over a byte string, through OpenSSL's libcrypto: the one plain cryptographic hash of the
// tree. The prefix cache keys KV blocks by it (engine/block_hash.hpp), where a weak hash would let one tenant's
// prompt collide with another's.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actorllm::util {

/// A SHA-256 digest: 32 bytes.
using sha256_digest = std::array<uint8_t, 32>;

/// The SHA-256 digest of `bytes`.
sha256_digest sha256(std::span<const uint8_t> bytes);

/// The SHA-256 digest of the bytes of `text`.
sha256_digest sha256(std::string_view text);

/// SHA-256 over bytes that arrive piece by piece (a download checked as it is written).
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;

  /// Adds `bytes` to the digest.
  void update(std::string_view bytes);
  /// The digest of everything added since construction or the last reset(); the stream starts over afterwards.
  sha256_digest finish();
  /// Forgets everything added so far.
  void reset();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept out of this header
};

/// Lowercase hex of a digest (64 characters), for logs and tests.
std::string to_hex(const sha256_digest& digest);

}  // namespace actorllm::util
