// A seeded random workload on a tiny KV cache: arrivals, aborts, stop strings, id reuse, prompts that share prefixes
// (some salted), prefix caching on and off and every policy / pipeline depth, with the scheduler's books checked after
// every step, every finished sequence checked against its solo run, and no block leaked at the end.
#include "engine/scheduler_core.hpp"

#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

using namespace actorllm::engine;
using actorllm::engine::test::driver;
using actorllm::engine::test::run_alone;

namespace {

constexpr int32_t vocab = 61;

/// The admission rule, restated independently of the scheduler.
bool admissible(const request& r, const scheduler_config& cfg) {
  auto p = static_cast<int64_t>(r.prompt.size());
  if (p < 1 || r.n < 1 || r.n > cfg.max_num_seqs || r.min_tokens < 0)
    return false;
  if (r.max_tokens ? (*r.max_tokens < 1 || p + *r.max_tokens > cfg.max_model_len) : p >= cfg.max_model_len)
    return false;
  int64_t m = r.max_tokens ? *r.max_tokens : cfg.max_model_len - p;
  if (r.min_tokens > m)
    return false;
  return (p + m - 1 + cfg.block_size - 1) / cfg.block_size <= cfg.n_blocks;
}

struct workload {
  scheduler_config cfg;
  scheduler_core sched;
  driver d;
  std::mt19937_64 rng;
  std::map<uint64_t, request> live;    ///< accepted requests not yet finished, by id
  std::set<seq_id> cut_short;          ///< sequences the test finished itself (stop string, abort)
  std::vector<uint64_t> reusable_ids;  ///< ids of aborted requests whose late results may still be in flight
  std::vector<std::vector<int32_t>> shared_prefixes;  ///< system prompts many requests start with
  uint64_t next_id = 1;
  int n_accepted = 0, n_rejected = 0, n_aborted = 0, n_verified_full = 0, n_reused_in_flight = 0;

  workload(const scheduler_config& c, uint64_t seed)
      : cfg(c), sched(std::move(scheduler_core::create(c)).value()), d(sched, vocab), rng(seed) {
    for (int32_t len : {5, 9, 14}) {
      shared_prefixes.emplace_back(static_cast<size_t>(len));
      for (auto& t : shared_prefixes.back())
        t = uniform(0, vocab - 1);
    }
  }

  int32_t uniform(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }

  request random_request(std::optional<uint64_t> forced_id = std::nullopt) {
    request r;
    if (forced_id) {
      r.id = *forced_id;
    } else if (!reusable_ids.empty() && chance(0.3)) {
      r.id = reusable_ids.back();
      reusable_ids.pop_back();
    } else {
      r.id = next_id++;
    }
    r.prompt.resize(static_cast<size_t>(uniform(chance(0.05) ? 0 : 1, chance(0.2) ? 60 : 24)));
    for (auto& t : r.prompt)
      t = uniform(0, vocab - 1);
    if (chance(0.6)) {
      // The prompt starts with a shared prefix (lengths stay as drawn, so admission is tested as before).
      const auto& prefix = shared_prefixes[static_cast<size_t>(uniform(0, 2))];
      std::copy_n(prefix.begin(), std::min(prefix.size(), r.prompt.size()), r.prompt.begin());
    }
    if (chance(0.2))
      r.cache_salt = chance(0.5) ? "tenant-a" : "tenant-b";
    if (chance(0.8))
      r.max_tokens = uniform(chance(0.02) ? 0 : 1, 30);
    r.n = chance(0.7) ? 1 : uniform(2, 3);
    r.priority = uniform(0, 3);
    r.eos_token_ids = {0};
    r.ignore_eos = chance(0.1);
    if (chance(0.3))
      r.stop_token_ids = {1, 2};
    if (chance(0.2))
      r.min_tokens = uniform(1, 6);
    return r;
  }

  /// Checks and forgets every request the last calls finished.
  void settle() {
    for (uint64_t rid : d.finished_requests) {
      REQUIRE(live.contains(rid));
      const request& r = live.at(rid);
      for (int32_t i = 0; i < r.n; ++i) {
        seq_id id{rid, static_cast<uint32_t>(i)};
        CAPTURE(to_string(id));
        CHECK(sched.tokens(id).empty());
        if (!d.finished.contains(id)) {
          // Siblings that never forked: the request ended before its prompt was prefilled.
          CHECK(i > 0);
          CHECK_FALSE(d.outputs.contains(id));
          continue;
        }
        auto ref = run_alone(r, static_cast<uint32_t>(i), cfg.max_model_len, vocab);
        const auto& out = d.outputs[id];
        if (cut_short.contains(id) || d.finished.at(id) == finish_reason::abort) {
          REQUIRE(out.size() <= ref.output.size());
          CHECK(std::equal(out.begin(), out.end(), ref.output.begin()));
        } else {
          CHECK(out == ref.output);
          CHECK(d.finished.at(id) == ref.reason);
          ++n_verified_full;
        }
        d.outputs.erase(id);
        d.finished.erase(id);
        cut_short.erase(id);
      }
      live.erase(rid);
    }
    d.finished_requests.clear();
  }

  void arrive(std::optional<uint64_t> forced_id = std::nullopt) {
    request r = random_request(forced_id);
    bool expect_ok = admissible(r, cfg) && !live.contains(r.id);
    auto res = sched.add_request(r);
    CHECK_MESSAGE(res.has_value() == expect_ok, (res.has_value() ? "accepted" : res.error().message));
    if (res.has_value()) {
      ++n_accepted;
      live.emplace(r.id, std::move(r));
    } else {
      ++n_rejected;
    }
  }

  /// Requests with a sequence in a plan still in flight: aborting those leaves late results to be ignored.
  std::vector<uint64_t> in_flight_requests() const {
    std::vector<uint64_t> ids;
    for (const auto& p : d.in_flight)
      for (seq_id id : p.live)
        if (live.contains(id.request_id))
          ids.push_back(id.request_id);
    return ids;
  }

  void abort_random() {
    auto busy = in_flight_requests();
    uint64_t rid = 0;
    if (!busy.empty() && chance(0.5))
      rid = busy[static_cast<size_t>(uniform(0, static_cast<int32_t>(busy.size()) - 1))];
    else
      rid = std::next(live.begin(), uniform(0, static_cast<int32_t>(live.size()) - 1))->first;
    const bool was_in_flight = std::find(busy.begin(), busy.end(), rid) != busy.end();
    auto events = sched.abort(rid);
    REQUIRE(events.has_value());
    for (const auto& e : *events)
      CHECK(e.finished == finish_reason::abort);
    d.apply(*events);
    CHECK(sched.allocator().n_free_blocks() + sched.allocator().n_blocks() * sched.kv_cache_usage() ==
          doctest::Approx(sched.allocator().n_blocks()));
    ++n_aborted;
    settle();
    if (was_in_flight && chance(0.5)) {
      // The same id comes straight back while the old sequence's plan is still out.
      arrive(rid);
      n_reused_in_flight += live.contains(rid) ? 1 : 0;
    } else {
      reusable_ids.push_back(rid);
    }
  }

  void stop_string_random() {
    std::vector<seq_id> candidates;
    for (const auto& [id, out] : d.outputs)
      if (!d.finished.contains(id) && !sched.tokens(id).empty())
        candidates.push_back(id);
    if (candidates.empty())
      return;
    seq_id id = candidates[static_cast<size_t>(uniform(0, static_cast<int32_t>(candidates.size()) - 1))];
    const int32_t free_before = sched.allocator().n_free_blocks();
    auto events = sched.finish_sequence(id, finish_reason::stop);
    REQUIRE(events.has_value());
    CHECK(sched.allocator().n_free_blocks() >= free_before);
    cut_short.insert(id);
    d.apply(*events);
    settle();
  }

  void run(int n_steps) {
    for (int step = 0; step < n_steps; ++step) {
      while (chance(0.3))
        arrive();
      if (!live.empty() && chance(0.04))
        abort_random();
      if (chance(0.03))
        stop_string_random();
      const bool stepped = d.step();
      REQUIRE_MESSAGE((stepped || !sched.has_unfinished()), "the scheduler stalled with live requests");
      settle();
    }
    // Drain: no more arrivals or aborts; everything must finish.
    int guard = 0;
    while (sched.has_unfinished() || !d.in_flight.empty()) {
      REQUIRE(++guard < 20000);
      REQUIRE(d.step());
      settle();
    }
    CHECK(live.empty());
    // No block leaked: every block is free, and every cached one evictable.
    CHECK(sched.allocator().n_free_blocks() == cfg.n_blocks);
    CHECK(sched.allocator().n_evictable_blocks() == sched.allocator().n_cached_blocks());
    CHECK(sched.allocator().n_sequences() == 0);
    CHECK(sched.n_running() == 0);
    CHECK(sched.n_waiting() == 0);
    CHECK(sched.check_invariants() == "");
  }
};

}  // namespace

TEST_CASE("scheduler keeps its books under a random workload on a tiny cache, prefix caching on and off [asan]") {
  uint64_t seed = 20240601;
  for (bool caching : {true, false})
    for (int32_t pp : {1, 2, 3})
      for (scheduling_policy policy : {scheduling_policy::fcfs, scheduling_policy::priority}) {
        // max_model_len 44 fits the 11-block cache (so requests without max_tokens run); 64 does not (so some are
        // rejected for the cache, and the ones without max_tokens all are).
        const bool roomy = (pp + static_cast<int>(policy)) % 2 == 0;
        scheduler_config cfg{.max_num_seqs = 6,
                             .max_num_batched_tokens = 16,
                             .block_size = 4,
                             .n_blocks = roomy ? 11 : 10,
                             .max_model_len = roomy ? 44 : 64,
                             .policy = policy,
                             .pp_size = pp,
                             .enable_prefix_caching = caching};
        CAPTURE(caching);
        CAPTURE(pp);
        CAPTURE(to_string(policy));
        workload w(cfg, seed++);
        w.run(1500);
        INFO("accepted ", w.n_accepted, ", rejected ", w.n_rejected, ", aborted ", w.n_aborted, " (",
             w.n_reused_in_flight, " ids reused while in flight), preemptions ", w.sched.n_preemptions(),
             ", fully verified sequences ", w.n_verified_full, ", prefix cache hits ", w.sched.prefix_cache_hits(),
             " of ", w.sched.prefix_cache_queries(), " tokens");
        CHECK(w.sched.n_preemptions() > 20);
        CHECK(w.n_rejected > 10);
        CHECK(w.n_aborted > 10);
        CHECK(w.n_verified_full > 100);
        if (pp > 1)
          CHECK(w.n_reused_in_flight >= 2);
        if (caching)
          CHECK(w.sched.prefix_cache_hits() > 100);
        else
          CHECK(w.sched.prefix_cache_queries() == 0);
      }
}
