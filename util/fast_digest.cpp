// A fast 128-bit digest (see fast_digest.hpp). Each chunk runs eight 64-bit lanes over 64-byte blocks: a lane adds
// the 32 x 32-bit product of its word's halves (the word mixed with a lane constant) and the plain word to its
// neighbour, and every 1 KiB the lanes are scrambled by a multiply; a chunk's lanes are then folded through a 64-bit
// finaliser into 128 bits. Chunks are fixed (1 MiB), so the pool's size never changes a digest; their digests are
// chained in order. The lanes are plain C++ that the compiler vectorises (vpmuludq on AVX-512, 8 lanes at once).
#include "util/fast_digest.hpp"

#include "util/thread_pool.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <vector>

namespace actorllm::util {

namespace {

constexpr size_t lanes = 8, block_bytes = lanes * sizeof(uint64_t), blocks_per_round = 16;
constexpr size_t chunk_bytes = size_t{1} << 20;

constexpr std::array<uint64_t, lanes> lane_keys = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                                                   0xd6e8feb86659fd93ull, 0xff51afd7ed558ccdull, 0xc4ceb9fe1a85ec53ull,
                                                   0x94d049bb133111ebull, 0xbf58476d1ce4e5b9ull};

uint64_t finalise(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

void accumulate(std::array<uint64_t, lanes>& acc, const std::byte* block) {
  std::array<uint64_t, lanes> word;
  std::memcpy(word.data(), block, block_bytes);
  for (size_t i = 0; i < lanes; ++i) {
    const uint64_t k = word[i] ^ lane_keys[i];
    acc[i] += (k & 0xffffffffull) * (k >> 32);
  }
  for (size_t i = 0; i < lanes; ++i)
    acc[i ^ 1] += word[i];
}

void scramble(std::array<uint64_t, lanes>& acc) {
  for (size_t i = 0; i < lanes; ++i)
    acc[i] = (acc[i] ^ (acc[i] >> 47) ^ lane_keys[(i + 3) % lanes]) * 0x9fb21c651e98df25ull;
}

digest128 chunk_digest(const std::byte* p, size_t n) {
  std::array<uint64_t, lanes> acc = lane_keys;
  size_t off = 0, in_round = 0;
  for (; off + block_bytes <= n; off += block_bytes) {
    accumulate(acc, p + off);
    if (++in_round == blocks_per_round) {
      scramble(acc);
      in_round = 0;
    }
  }
  if (off < n) {  // the tail, zero-padded (the length below tells it from real zeros)
    std::array<std::byte, block_bytes> last{};
    std::memcpy(last.data(), p + off, n - off);
    accumulate(acc, last.data());
  }
  scramble(acc);
  digest128 d{static_cast<uint64_t>(n) * 0x9e3779b97f4a7c15ull, ~static_cast<uint64_t>(n)};
  for (size_t i = 0; i < lanes; ++i) {
    d.lo = finalise(d.lo ^ acc[i]) + 0x27d4eb2f165667c5ull;
    d.hi = finalise(d.hi + (acc[i] ^ lane_keys[lanes - 1 - i]));
  }
  return d;
}

}  // namespace

std::string digest128::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

void fast_digest::mix(const digest128& piece) {
  ++pieces_;
  state_.lo = finalise(state_.lo ^ piece.lo ^ pieces_) * 0x9e3779b97f4a7c15ull;
  state_.hi = finalise(state_.hi + piece.hi + (state_.lo >> 7));
}

void fast_digest::add(std::span<const std::byte> bytes, thread_pool& pool) {
  const size_t n_chunks = (bytes.size() + chunk_bytes - 1) / chunk_bytes;
  std::vector<digest128> chunks(n_chunks);
  pool.parallel_for_dynamic(static_cast<int64_t>(n_chunks), 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t off = static_cast<size_t>(c) * chunk_bytes;
      chunks[static_cast<size_t>(c)] = chunk_digest(bytes.data() + off, std::min(chunk_bytes, bytes.size() - off));
    }
  });
  digest128 piece{bytes.size(), n_chunks};
  for (const digest128& c : chunks) {
    piece.lo = finalise(piece.lo ^ c.lo) + c.hi;
    piece.hi = finalise(piece.hi + c.hi) ^ c.lo;
  }
  mix(piece);
}

void fast_digest::add(uint64_t value) { mix({finalise(value) ^ 0x5555555555555555ull, value}); }

digest128 fast_digest::value() const { return {finalise(state_.lo ^ pieces_), finalise(state_.hi + pieces_)}; }

}  // namespace actorllm::util
