// A fast 128-bit digest of byte strings, for telling whether bytes are the ones seen before (a cache entry against
// its source) at memory speed: not cryptographic (util/sha256.hpp is, at a tenth of the speed), so never a key that
// another tenant's input could be made to collide with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace actorllm {
class thread_pool;
}

namespace actorllm::util {

/// 128 bits of digest.
struct digest128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const digest128&) const = default;
  /// 32 lowercase hex digits, hi first.
  std::string hex() const;
};

/// Digests a sequence of byte strings as one: `pieces` in order (their boundaries count, so {"ab", "c"} and
/// {"a", "bc"} differ), split into fixed chunks hashed over `pool`. The result does not depend on the pool's size.
class fast_digest {
 public:
  /// Adds `bytes` as the next piece, hashed now over `pool`.
  void add(std::span<const std::byte> bytes, thread_pool& pool);
  /// Adds a number (a shape, a format version) as a piece of its own.
  void add(uint64_t value);
  /// The digest of every piece added so far.
  digest128 value() const;

 private:
  digest128 state_{0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull};
  uint64_t pieces_ = 0;
  void mix(const digest128& piece);
};

}  // namespace actorllm::util
