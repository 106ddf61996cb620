// The fast digest: the same bytes give the same digest whatever the pool, and any change gives another.
#include "util/fast_digest.hpp"
#include "util/thread_pool.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <random>
#include <vector>

using namespace actorllm;

namespace {

// 2.5 MiB plus an odd tail: two whole 1 MiB chunks, a partial one, and a last block shorter than 64 bytes.
std::vector<std::byte> random_bytes(size_t n = (size_t{5} << 19) + 37) {
  std::mt19937_64 rng(7);
  std::vector<std::byte> b(n);
  for (auto& x : b)
    x = static_cast<std::byte>(rng());
  return b;
}

util::digest128 digest(const std::vector<std::byte>& b, thread_pool& pool) {
  util::fast_digest d;
  d.add(b, pool);
  return d.value();
}

}  // namespace

TEST_CASE("fast_digest: the same bytes give the same digest on pools of 1, 2 and 3 threads") {
  const auto bytes = random_bytes();
  thread_pool one(1), two(2), three(3);
  const util::digest128 d = digest(bytes, one);
  CHECK(digest(bytes, two) == d);
  CHECK(digest(bytes, three) == d);
  CHECK(d.hex().size() == 32);
  CHECK_FALSE(d == util::digest128{});
}

TEST_CASE("fast_digest: one flipped bit anywhere changes the digest [asan]") {
  auto bytes = random_bytes();
  thread_pool pool(2);
  const util::digest128 d = digest(bytes, pool);
  // The first byte, the last of a chunk, the first of the next, inside the zero-padded tail, the very last.
  for (size_t at : {size_t{0}, (size_t{1} << 20) - 1, size_t{1} << 20, bytes.size() - 20, bytes.size() - 1}) {
    CAPTURE(at);
    bytes[at] ^= std::byte{0x10};
    CHECK_FALSE(digest(bytes, pool) == d);
    bytes[at] ^= std::byte{0x10};
  }
  CHECK(digest(bytes, pool) == d);
  // A tail padded with zeros is not the same bytes as one that ends in zeros.
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_FALSE(digest(longer, pool) == d);
}

TEST_CASE("fast_digest: pieces count apart, numbers apart from bytes, and order matters") {
  thread_pool pool(2);
  const std::vector<std::byte> ab{std::byte{'a'}, std::byte{'b'}}, c{std::byte{'c'}}, a{std::byte{'a'}},
      bc{std::byte{'b'}, std::byte{'c'}};
  util::fast_digest x, y, z;
  x.add(ab, pool);
  x.add(c, pool);
  y.add(a, pool);
  y.add(bc, pool);
  CHECK_FALSE(x.value() == y.value());
  util::fast_digest n1, n2, n3;
  n1.add(1);
  n1.add(2);
  n2.add(2);
  n2.add(1);
  CHECK_FALSE(n1.value() == n2.value());
  const uint64_t one = 1;
  n3.add({reinterpret_cast<const std::byte*>(&one), sizeof one}, pool);
  util::fast_digest n4;
  n4.add(1);
  CHECK_FALSE(n3.value() == n4.value());
  CHECK(util::fast_digest{}.value() == util::fast_digest{}.value());
  z.add(0);
  CHECK_FALSE(z.value() == util::fast_digest{}.value());
}
