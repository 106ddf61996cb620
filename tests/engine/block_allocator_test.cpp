// The KV block pool: tables grow a block at a time, forks share blocks by reference count, a shared partial last
// block is copied before the first write into it, frees return blocks only when the last holder lets go, and misuse
// is an error value that leaves the pool as it was.
#include "engine/block_allocator.hpp"

#include <doctest/doctest.h>

#include <vector>

using actorllm::engine::block_allocator;
using actorllm::engine::block_copy;
using actorllm::engine::block_id;
using actorllm::engine::engine_errc;
using actorllm::engine::seq_id;

namespace {
std::vector<block_id> table(const block_allocator& a, seq_id s) {
  auto t = a.block_table(s);
  return {t.begin(), t.end()};
}
}  // namespace

TEST_CASE("block_allocator grows a table one block per block_size tokens") {
  block_allocator a(8, 4);
  const seq_id s{1, 0};
  CHECK(a.n_free_blocks() == 8);
  CHECK(a.usage() == 0.0);
  CHECK(a.blocks_needed(s, 5) == 2);
  auto copy = a.append_slots(s, 5);
  REQUIRE(copy.has_value());
  CHECK_FALSE(copy->has_value());
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

TEST_CASE("block_allocator fork shares every block and copies a shared partial block on write") {
  block_allocator a(10, 4);
  const seq_id parent{7, 0}, child1{7, 1}, child2{7, 2};
  REQUIRE(a.append_slots(parent, 10).has_value());  // blocks 0, 1 full; block 2 holds 2 of 4
  REQUIRE(a.fork(parent, child1).has_value());
  REQUIRE(a.fork(parent, child2).has_value());
  CHECK(table(a, child1) == table(a, parent));
  CHECK(a.n_tokens(child2) == 10);
  for (block_id b : {0, 1, 2})
    CHECK(a.ref_count(b) == 3);
  CHECK(a.n_free_blocks() == 7);  // three tables, three blocks
  CHECK(a.check_invariants() == "");

  // The first writer into the shared tail gets a private copy; the full prompt blocks stay shared.
  CHECK(a.blocks_needed(child1, 1) == 1);
  auto c1 = a.append_slots(child1, 1);
  REQUIRE(c1.has_value());
  REQUIRE(c1->has_value());
  CHECK(**c1 == block_copy{2, 3});
  CHECK(table(a, child1) == std::vector<block_id>{0, 1, 3});
  CHECK(a.ref_count(2) == 2);
  CHECK(a.ref_count(0) == 3);

  auto c2 = a.append_slots(child2, 3);  // fills its copy of the tail and spills into one more block
  REQUIRE(c2.has_value());
  REQUIRE(c2->has_value());
  CHECK(**c2 == block_copy{2, 4});
  CHECK(table(a, child2) == std::vector<block_id>{0, 1, 4, 5});

  // The parent is now the tail's only holder and writes in place.
  CHECK(a.ref_count(2) == 1);
  CHECK(a.blocks_needed(parent, 2) == 0);
  auto cp = a.append_slots(parent, 2);
  REQUIRE(cp.has_value());
  CHECK_FALSE(cp->has_value());
  CHECK(table(a, parent) == std::vector<block_id>{0, 1, 2});
  CHECK(a.check_invariants() == "");

  // Appending at a block boundary never copies: a full shared block is never written again.
  const seq_id grandchild{7, 3};
  REQUIRE(a.fork(parent, grandchild).has_value());  // parent holds exactly 12 tokens = 3 full blocks
  auto cg = a.append_slots(grandchild, 1);
  REQUIRE(cg.has_value());
  CHECK_FALSE(cg->has_value());
  CHECK(a.ref_count(2) == 2);
  CHECK(a.check_invariants() == "");
}

TEST_CASE("block_allocator returns a shared block to the pool only when its last holder frees it") {
  block_allocator a(6, 4);
  const seq_id p{1, 0}, c{1, 1};
  REQUIRE(a.append_slots(p, 8).has_value());
  REQUIRE(a.fork(p, c).has_value());
  CHECK(a.n_free_blocks() == 4);
  REQUIRE(a.free(p).has_value());
  CHECK(a.n_free_blocks() == 4);  // the child still reads both blocks
  CHECK(a.ref_count(0) == 1);
  REQUIRE(a.free(c).has_value());
  CHECK(a.n_free_blocks() == 6);
  CHECK(a.ref_count(0) == 0);
  CHECK(a.check_invariants() == "");
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
  }
  SUBCASE("copy-on-write counts against the pool") {
    REQUIRE(a.fork(s, t).has_value());
    CHECK(a.blocks_needed(t, 4) == 2);  // a copy of the tail plus one more block, with only one free
    CHECK_FALSE(a.can_append(t, 4));
    auto r = a.append_slots(t, 4);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::out_of_blocks);
    CHECK(table(a, t) == table(a, s));
    CHECK(a.ref_count(2) == 2);
  }
  SUBCASE("double free") {
    REQUIRE(a.free(s).has_value());
    auto r = a.free(s);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::unknown_sequence);
    CHECK(r.error().message.find("already freed") != std::string::npos);
    CHECK(a.n_free_blocks() == 4);
  }
  SUBCASE("fork from an unknown parent or onto a live child") {
    auto r = a.fork(t, seq_id{5, 0});
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::unknown_sequence);
    REQUIRE(a.append_slots(t, 1).has_value());
    auto r2 = a.fork(s, t);
    REQUIRE_FALSE(r2.has_value());
    CHECK(r2.error().code == engine_errc::sequence_exists);
    CHECK(a.n_tokens(t) == 1);
  }
  SUBCASE("queries about unknown sequences are empty") {
    CHECK(a.block_table(t).empty());
    CHECK(a.n_tokens(t) == 0);
    CHECK(a.ref_count(-1) == 0);
    CHECK(a.ref_count(99) == 0);
    auto r = a.append_slots(s, -1);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == engine_errc::invalid_argument);
  }
  CHECK(a.check_invariants() == "");
}
