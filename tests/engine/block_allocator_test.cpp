// The KV block pool: tables grow a block at a time, full blocks are shared by reference count and registered in the
// prefix cache under their chained SHA-256, free cached blocks are evicted least recently used first (after every
// empty block), frees return blocks only when the last holder lets go, and misuse is an error value that leaves the
// pool as it was.
#include "engine/block_allocator.hpp"
#include "engine/block_hash.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <set>
#include <vector>

using actorllm::engine::block_allocator;
using actorllm::engine::block_hash;
using actorllm::engine::block_id;
using actorllm::engine::engine_errc;
using actorllm::engine::seq_id;
namespace engine = actorllm::engine;

namespace {

std::vector<block_id> table(const block_allocator& a, seq_id s) {
  auto t = a.block_table(s);
  return {t.begin(), t.end()};
}

/// The chained hashes of the full blocks of `tokens` (no salt).
std::vector<block_hash> hashes_of(const std::vector<int32_t>& tokens, int32_t block_size,
                                  const std::optional<std::string>& salt = std::nullopt) {
  std::vector<block_hash> h;
  engine::extend_block_hashes(h, tokens, block_size, tokens.size() / static_cast<size_t>(block_size),
                              engine::first_block_extra_keys(salt));
  return h;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = start + i;
  return t;
}

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  CHECK(actorllm::util::to_hex(actorllm::util::sha256("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(actorllm::util::to_hex(actorllm::util::sha256("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("block hashes chain the parent digest, the token ids and the salt") {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  auto ha = hashes_of(a, 4);
  REQUIRE(ha.size() == 2);
  // The definition: SHA-256 over parent || little-endian int32 tokens || extra keys.
  std::vector<uint8_t> bytes(engine::root_block_hash.begin(), engine::root_block_hash.end());
  for (int32_t t : {1, 2, 3, 4})
    for (int shift = 0; shift < 32; shift += 8)
      bytes.push_back(static_cast<uint8_t>(static_cast<uint32_t>(t) >> shift));
  CHECK(ha[0] == actorllm::util::sha256(bytes));
  CHECK(ha[1] == engine::hash_block(ha[0], std::vector<int32_t>{5, 6, 7, 8}, ""));

  // Same second block after a different first block: a different hash (the chain carries the prefix).
  auto hb = hashes_of({9, 2, 3, 4, 5, 6, 7, 8}, 4);
  CHECK(hb[0] != ha[0]);
  CHECK(hb[1] != ha[1]);
  // Same tokens in another order, and a token that differs only in its high bytes.
  CHECK(hashes_of({2, 1, 3, 4}, 4)[0] != ha[0]);
  CHECK(hashes_of({1 + (1 << 16), 2, 3, 4}, 4)[0] != ha[0]);
  // A salt changes the first block and so every later one; the same salt gives the same chain.
  auto salted = hashes_of(a, 4, std::string{"tenant-a"});
  CHECK(salted[0] != ha[0]);
  CHECK(salted[1] != ha[1]);
  CHECK(hashes_of(a, 4, std::string{"tenant-a"}) == salted);
  CHECK(hashes_of(a, 4, std::string{"tenant-b"})[0] != salted[0]);
  // Extending is incremental: the same digests whether computed at once or a block at a time.
  std::vector<block_hash> step;
  engine::extend_block_hashes(step, a, 4, 1, "");
  engine::extend_block_hashes(step, a, 4, 2, "");
  CHECK(step == ha);
}

TEST_CASE("block_allocator grows a table one block per block_size tokens") {
  block_allocator a(8, 4);
  const seq_id s{1, 0};
  CHECK(a.n_free_blocks() == 8);
  CHECK(a.usage() == 0.0);
  CHECK(a.blocks_needed(s, 5) == 2);
  REQUIRE(a.append_slots(s, 5).has_value());
  CHECK(table(a, s) == std::vector<block_id>{0, 1});
  CHECK(a.n_tokens(s) == 5);
  CHECK(a.n_free_blocks() == 6);
  CHECK(a.usage() == doctest::Approx(0.25));
  // Three more tokens fill block 1 exactly; the ninth needs a new block.
  CHECK(a.blocks_needed(s, 3) == 0);
  REQUIRE(a.append_slots(s, 3).has_value());
  CHECK(a.n_free_blocks() == 6);
  CHECK(a.blocks_needed(s, 1) == 1);
  REQUIRE(a.append_slots(s, 1).has_value());
  CHECK(table(a, s) == std::vector<block_id>{0, 1, 2});
  CHECK(a.check_invariants() == "");
  REQUIRE(a.free(s).has_value());
  CHECK(a.n_free_blocks() == 8);
  CHECK_FALSE(a.contains(s));
  CHECK(a.check_invariants() == "");
}

TEST_CASE("block_allocator shares cached full blocks by reference count and keeps them after the last holder") {
  block_allocator a(10, 4);
  const auto prompt = iota_tokens(10, 100);  // blocks 0, 1 full; block 2 holds 2 of 4
  const auto h = hashes_of(prompt, 4);
  const seq_id first{1, 0}, second{2, 0}, third{3, 0};
  REQUIRE(a.append_slots(first, 10).has_value());
  CHECK(a.find_cached_prefix(h).empty());  // nothing registered until the KV is computed
  REQUIRE(a.cache_blocks(first, h).has_value());
  CHECK(a.n_cached_blocks() == 2);
  CHECK(a.hash_of(0) == h[0]);
  CHECK(a.hash_of(1) == h[1]);
  CHECK_FALSE(a.hash_of(2).has_value());
  CHECK(a.check_invariants() == "");

  // A second sequence with the same prompt shares both full blocks and writes its own tail.
  auto hit = a.find_cached_prefix(h);
  CHECK(hit == std::vector<block_id>{0, 1});
  CHECK(a.blocks_needed_to_start(hit, 2) == 1);  // the shared blocks are held, so they cost nothing
  REQUIRE(a.start_sequence(second, hit, 2).has_value());
  CHECK(table(a, second) == std::vector<block_id>{0, 1, 3});
  CHECK(a.n_tokens(second) == 10);
  CHECK(a.ref_count(0) == 2);
  CHECK(a.ref_count(1) == 2);
  CHECK(a.n_free_blocks() == 6);
  // Registering the same hashes from the sharer changes nothing.
  REQUIRE(a.cache_blocks(second, h).has_value());
  CHECK(a.n_cached_blocks() == 2);
  CHECK(a.check_invariants() == "");

  // Both let go: the cached blocks stay reusable (free, but evictable rather than empty).
  REQUIRE(a.free(first).has_value());
  CHECK(a.ref_count(0) == 1);
  REQUIRE(a.free(second).has_value());
  CHECK(a.n_free_blocks() == 10);
  CHECK(a.n_evictable_blocks() == 2);
  CHECK(a.usage() == 0.0);
  CHECK(a.check_invariants() == "");

  // A hit on free cached blocks takes them off the free pool: they count against what the new sequence needs.
  hit = a.find_cached_prefix(h);
  CHECK(hit == std::vector<block_id>{0, 1});
  CHECK(a.blocks_needed_to_start(hit, 3) == 3);
  REQUIRE(a.start_sequence(third, hit, 3).has_value());
  CHECK(a.n_evictable_blocks() == 0);
  CHECK(a.n_free_blocks() == 7);
  CHECK(a.check_invariants() == "");
  // A duplicate: the same content computed in another block stays unregistered; the first block serves the hits.
  const seq_id twin{4, 0};
  REQUIRE(a.append_slots(twin, 8).has_value());
  REQUIRE(a.cache_blocks(twin, h).has_value());
  CHECK(a.n_cached_blocks() == 2);
  CHECK_FALSE(a.hash_of(table(a, twin)[0]).has_value());
  CHECK(a.check_invariants() == "");
}

TEST_CASE("block_allocator evicts empty blocks first, then cached ones least recently freed first, tails first") {
  block_allocator a(6, 2);
  const seq_id s1{1, 0}, s2{2, 0};
  const auto t1 = iota_tokens(4, 10), t2 = iota_tokens(4, 20);
  REQUIRE(a.append_slots(s1, 4).has_value());  // blocks 0, 1
  REQUIRE(a.append_slots(s2, 4).has_value());  // blocks 2, 3
  REQUIRE(a.cache_blocks(s1, hashes_of(t1, 2)).has_value());
  REQUIRE(a.cache_blocks(s2, hashes_of(t2, 2)).has_value());
  REQUIRE(a.free(s1).has_value());  // eviction order so far: 1, 0 (the tail before its prefix)
  REQUIRE(a.free(s2).has_value());  // then 3, 2
  CHECK(a.n_evictable_blocks() == 4);
  CHECK(a.check_invariants() == "");

  // The two empty blocks go first, then the cached ones in eviction order; each eviction forgets its hash.
  const seq_id taker{3, 0};
  REQUIRE(a.append_slots(taker, 4).has_value());
  CHECK(table(a, taker) == std::vector<block_id>{4, 5});
  CHECK(a.n_cached_blocks() == 4);
  REQUIRE(a.append_slots(taker, 2).has_value());
  CHECK(table(a, taker).back() == 1);
  CHECK(a.n_cached_blocks() == 3);
  CHECK(a.find_cached_prefix(hashes_of(t1, 2)) == std::vector<block_id>{0});  // the prefix outlived its tail
  CHECK(a.check_invariants() == "");

  // A hit refreshes: block 0 used again and freed again goes behind 3 and 2.
  const seq_id reader{4, 0};
  REQUIRE(a.start_sequence(reader, std::vector<block_id>{0}, 0).has_value());
  REQUIRE(a.free(reader).has_value());
  REQUIRE(a.append_slots(taker, 2).has_value());
  CHECK(table(a, taker).back() == 3);
  REQUIRE(a.append_slots(taker, 2).has_value());
  CHECK(table(a, taker).back() == 2);
  REQUIRE(a.append_slots(taker, 2).has_value());
  CHECK(table(a, taker).back() == 0);
  CHECK(a.n_cached_blocks() == 0);
  CHECK(a.n_free_blocks() == 0);
  CHECK(a.check_invariants() == "");
  REQUIRE(a.free(taker).has_value());
  CHECK(a.n_free_blocks() == 6);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("block_allocator reset_cache forgets every hash and caching off registers nothing") {
  block_allocator a(4, 2);
  const auto t = iota_tokens(4, 1);
  const seq_id s{1, 0}, held{2, 0};
  REQUIRE(a.append_slots(s, 4).has_value());
  REQUIRE(a.cache_blocks(s, hashes_of(t, 2)).has_value());
  REQUIRE(a.free(s).has_value());
  REQUIRE(a.append_slots(held, 2).has_value());
  REQUIRE(a.cache_blocks(held, hashes_of(iota_tokens(2, 50), 2)).has_value());
  CHECK(a.n_cached_blocks() == 3);
  CHECK(a.reset_cache() == 3);
  CHECK(a.n_cached_blocks() == 0);
  CHECK(a.n_evictable_blocks() == 0);
  CHECK(a.n_free_blocks() == 3);
  CHECK(a.find_cached_prefix(hashes_of(t, 2)).empty());
  CHECK(a.check_invariants() == "");
  REQUIRE(a.free(held).has_value());
  CHECK(a.n_evictable_blocks() == 0);  // it lost its hash while held, so it comes back empty
  CHECK(a.check_invariants() == "");

  block_allocator off(4, 2, /*enable_caching=*/false);
  REQUIRE(off.append_slots(s, 4).has_value());
  REQUIRE(off.cache_blocks(s, hashes_of(t, 2)).has_value());
  CHECK(off.n_cached_blocks() == 0);
  CHECK(off.find_cached_prefix(hashes_of(t, 2)).empty());
  REQUIRE(off.free(s).has_value());
  CHECK(off.check_invariants() == "");
}

TEST_CASE("block_allocator misuse is an error value and changes nothing") {
  block_allocator a(4, 4);
  const seq_id s{3, 0}, t{4, 0};
  REQUIRE(a.append_slots(s, 9).has_value());  // 3 blocks
  CHECK(a.n_free_blocks() == 1);

  SUBCASE("out of blocks") {
    CHECK_FALSE(a.can_append(s, 8));
    auto r = a.append_slots(s, 8);  // would need 2 more blocks, 1 is free
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::out_of_blocks);
    CHECK(r.error().message.find("needs 2 more blocks") != std::string::npos);
    CHECK(a.n_tokens(s) == 9);
    CHECK(a.n_free_blocks() == 1);
    auto r2 = a.start_sequence(t, a.block_table(s).first(2), 5);  // shares two held blocks, needs 2 new ones
    REQUIRE_FALSE(r2.has_value());
    CHECK(r2.error().code == engine_errc::out_of_blocks);
    CHECK_FALSE(a.contains(t));
    CHECK(a.ref_count(0) == 1);
  }
  SUBCASE("double free") {
    REQUIRE(a.free(s).has_value());
    auto r = a.free(s);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::unknown_sequence);
    CHECK(r.error().message.find("already freed") != std::string::npos);
    CHECK(a.n_free_blocks() == 4);
  }
  SUBCASE("starting a live sequence, or from an empty free block") {
    auto r = a.start_sequence(s, {}, 1);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::sequence_exists);
    auto r2 = a.start_sequence(t, std::vector<block_id>{3}, 0);  // block 3 is free and was never cached
    REQUIRE_FALSE(r2.has_value());
    CHECK(r2.error().code == engine_errc::invalid_argument);
    CHECK(r2.error().message.find("content is gone") != std::string::npos);
    auto r3 = a.start_sequence(t, std::vector<block_id>{7}, 0);
    REQUIRE_FALSE(r3.has_value());
    CHECK(r3.error().code == engine_errc::invalid_argument);
    CHECK_FALSE(a.contains(t));
  }
  SUBCASE("registering more blocks than are full, under a conflicting hash, or for an unknown sequence") {
    const auto h = hashes_of(iota_tokens(12, 0), 4);
    auto r = a.cache_blocks(s, h);  // 3 hashes, 2 full blocks
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::invalid_argument);
    CHECK(a.n_cached_blocks() == 0);
    REQUIRE(a.cache_blocks(s, std::span(h).first(1)).has_value());
    REQUIRE(a.start_sequence(t, a.block_table(s).first(1), 0).has_value());
    const auto other = hashes_of(iota_tokens(4, 77), 4);
    auto r2 = a.cache_blocks(t, other);  // block 0 is registered under h[0]
    REQUIRE_FALSE(r2.has_value());
    CHECK(r2.error().message.find("registered under") != std::string::npos);
    REQUIRE(a.free(t).has_value());
    CHECK(a.cache_blocks(t, {}).error().code == engine_errc::unknown_sequence);
  }
  SUBCASE("queries about unknown sequences are empty") {
    CHECK(a.block_table(t).empty());
    CHECK(a.n_tokens(t) == 0);
    CHECK(a.ref_count(-1) == 0);
    CHECK(a.ref_count(99) == 0);
    CHECK_FALSE(a.hash_of(99).has_value());
    auto r = a.append_slots(s, -1);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::invalid_argument);
  }
  CHECK(a.check_invariants() == "");
}

TEST_CASE("block_allocator invariant checker holds through random sharing, caching, eviction and frees") {
  // Sequences draw prompts from a few shared prefixes, so hits, duplicates and evictions all happen.
  block_allocator a(12, 2);
  std::vector<std::vector<int32_t>> live_tokens;
  std::vector<seq_id> live;
  uint64_t next = 1;
  uint32_t state = 12345;
  auto rnd = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % n;
  };
  int hits = 0;
  for (int round = 0; round < 3000; ++round) {
    if (live.empty() || rnd(3) != 0) {
      std::vector<int32_t> tokens = iota_tokens(static_cast<int32_t>(2 * (1 + rnd(3))), static_cast<int32_t>(rnd(3)));
      tokens.push_back(static_cast<int32_t>(rnd(5)));
      const auto h = hashes_of(tokens, 2);
      auto hit = a.find_cached_prefix(std::span(h).first(std::min<size_t>(h.size(), (tokens.size() - 1) / 2)));
      const int64_t rest = static_cast<int64_t>(tokens.size()) - static_cast<int64_t>(hit.size()) * 2;
      if (!a.can_start(hit, rest))
        continue;
      const seq_id s{next++, 0};
      REQUIRE(a.start_sequence(s, hit, rest).has_value());
      hits += hit.empty() ? 0 : 1;
      REQUIRE(a.cache_blocks(s, h).has_value());
      live.push_back(s);
      live_tokens.push_back(tokens);
    } else {
      const size_t i = rnd(static_cast<uint32_t>(live.size()));
      REQUIRE(a.free(live[i]).has_value());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      live_tokens.erase(live_tokens.begin() + static_cast<std::ptrdiff_t>(i));
    }
    REQUIRE_MESSAGE(a.check_invariants() == "", a.check_invariants());
  }
  CHECK(hits > 100);
  for (seq_id s : live)
    REQUIRE(a.free(s).has_value());
  // No leak: every block is free, the cached ones evictable.
  CHECK(a.n_free_blocks() == a.n_blocks());
  CHECK(a.n_evictable_blocks() == a.n_cached_blocks());
  CHECK(a.check_invariants() == "");
}
