// A deterministic stand-in for the model in scheduler tests: it keeps a real paged KV cache whose slot for position p
// holds, like real KV, a value that depends on every token up to p (a running hash: the slot of p - 1, read through
// the block table, mixed with token p), and samples the next token from the slot of the sampling row. A wrong block
// table, a cached block reused after a different prefix, an unwritten slot read or a bad re-prefill after preemption
// therefore changes the output, which the tests compare with a run of the same sequence alone. Like a shard, the fake
// model knows only what the plans sent it: each sequence's block table is rebuilt from the diffs
// (engine::shard_tables), and the sampler state of each request from new_requests and released_requests, so every test
// also checks the step protocol.
#pragma once

#include "engine/request.hpp"
#include "engine/scheduler_config.hpp"
#include "engine/scheduler_core.hpp"
#include "engine/seq_event.hpp"
#include "engine/shard_tables.hpp"
#include "engine/step_plan.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace actorllm::engine::test {

/// A scheduler for `cfg`; the test fails (naming why) when the config is refused.
inline scheduler_core make_scheduler(const scheduler_config& cfg) {
  auto s = scheduler_core::create(cfg);
  REQUIRE_MESSAGE(s.has_value(), (s.has_value() ? "" : s.error().message));
  return std::move(s).value();
}

inline uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

/// The running hash before the first token.
inline constexpr uint64_t kv_seed = 0x12345;

/// The fake KV of a position: the previous position's, mixed with this position's token.
inline uint64_t next_kv(uint64_t previous, int32_t token) {
  return mix(previous, static_cast<uint64_t>(static_cast<uint32_t>(token)));
}

/// The token sampled from the fake KV of the last position; `salt` is its seq-dependent part (the sequence index
/// within its request), so the n sequences of a request diverge.
inline int32_t sample_from(uint64_t kv, uint32_t salt, int32_t vocab) {
  return static_cast<int32_t>(mix(kv, salt) % static_cast<uint64_t>(vocab));
}

/// The fake model's next token for a sequence whose tokens so far are `prefix`.
inline int32_t next_token(std::span<const int32_t> prefix, uint32_t salt, int32_t vocab) {
  uint64_t h = kv_seed;
  for (int32_t t : prefix)
    h = next_kv(h, t);
  return sample_from(h, salt, vocab);
}

/// What `req`'s sequence `index` generates when it runs alone: the scheduler's stop rules, reimplemented plainly.
struct reference_run {
  std::vector<int32_t> output;
  finish_reason reason = finish_reason::length;
};

inline reference_run run_alone(const request& req, uint32_t index, int32_t max_model_len, int32_t vocab,
                               bool salted = true) {
  std::vector<int32_t> tokens = req.prompt;
  const int32_t max_tokens = req.max_tokens.value_or(max_model_len - static_cast<int32_t>(req.prompt.size()));
  reference_run run;
  for (;;) {
    int32_t t = next_token(tokens, salted ? index : 0, vocab);
    tokens.push_back(t);
    run.output.push_back(t);
    auto n_out = static_cast<int32_t>(run.output.size());
    auto has = [t](const std::vector<int32_t>& ids) { return std::find(ids.begin(), ids.end(), t) != ids.end(); };
    if (n_out >= req.min_tokens && ((!req.ignore_eos && has(req.eos_token_ids)) || has(req.stop_token_ids))) {
      run.reason = finish_reason::stop;
      return run;
    }
    if (n_out >= max_tokens || static_cast<int32_t>(tokens.size()) >= max_model_len) {
      run.reason = finish_reason::length;
      return run;
    }
  }
}

/// The sequences a plan schedules, in its order.
inline std::vector<seq_id> scheduled_seqs(const step_plan& plan) {
  std::vector<seq_id> out;
  for (const auto& s : plan.sequences)
    out.push_back(s.seq);
  return out;
}

/// Each scheduled sequence's whole block table as the scheduler holds it, in plan order: what the shards' copy must
/// be when they run the plan. Read right after schedule() (a sequence in a plan in flight keeps its table until the
/// result is in, unless it is aborted meanwhile).
inline std::vector<std::vector<block_id>> whole_tables(const scheduler_core& sched, const step_plan& plan) {
  std::vector<std::vector<block_id>> out;
  for (const auto& s : plan.sequences) {
    const auto t = sched.allocator().block_table(s.seq);
    out.emplace_back(t.begin(), t.end());
  }
  return out;
}

/// Empty when `plan`, its sequences holding `tables`, fits a cache of `n_blocks` blocks of `block_size` tokens;
/// otherwise what is wrong (model::forward_batch::validate's rules, on the plan as the shards get it).
inline std::string validate(const step_plan& plan, const std::vector<std::vector<block_id>>& tables, int64_t block_size,
                            int64_t n_blocks) {
  const int64_t n_tokens = plan.n_tokens();
  if (plan.positions.size() != plan.tokens.size())
    return "positions and tokens differ in number";
  if (tables.size() != plan.sequences.size())
    return "a table per sequence is missing";
  if (plan.sample_rows.size() != plan.sample_seqs.size())
    return "sample rows and sample sequences differ in number";
  int64_t next_row = 0;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    const auto& seq = plan.sequences[s];
    if (seq.query_begin != next_row || seq.n_query <= 0)
      return "sequence " + std::to_string(s) + " does not start at the next row";
    next_row += seq.n_query;
    if (next_row > n_tokens)
      return "sequence " + std::to_string(s) + " runs past the batch";
    for (block_id b : tables[s])
      if (b < 0 || b >= n_blocks)
        return "sequence " + std::to_string(s) + " uses block " + std::to_string(b) + " outside the cache";
    for (int32_t r = seq.query_begin; r < seq.query_begin + seq.n_query; ++r) {
      const int64_t pos = plan.positions[static_cast<size_t>(r)];
      if (pos < 0 || pos / block_size >= static_cast<int64_t>(tables[s].size()))
        return "row " + std::to_string(r) + " has a position beyond its sequence's blocks";
    }
  }
  if (next_row != n_tokens)
    return "the sequences do not cover the batch";
  for (int32_t r : plan.sample_rows)
    if (r < 0 || r >= n_tokens)
      return "sample row " + std::to_string(r) + " is outside the batch";
  return {};
}

/// The paged cache of token ids the fake model reads and writes, the block tables the plans' diffs build up and the
/// requests whose sampler state the plans created.
class fake_model {
 public:
  fake_model(const scheduler_config& config, int32_t vocab, bool salted = true)
      : block_size_(config.block_size),
        n_blocks_(config.n_blocks),
        vocab_(vocab),
        salted_(salted),
        cache_(static_cast<size_t>(config.n_blocks) * static_cast<size_t>(config.block_size), unwritten) {}

  /// Runs one step as a shard does: applies its diffs (block tables, sampler state), then the writes of every row in
  /// order, then one sampled token per sample row. `expected`: each sequence's whole table when the plan was handed
  /// out (whole_tables), which the tables the diffs built must equal; empty: not checked.
  std::vector<int32_t> run(const step_plan& plan, const std::vector<std::vector<block_id>>& expected = {}) {
    const std::string applied = tables_.apply(plan);
    REQUIRE_MESSAGE(applied.empty(), applied);
    apply_samplers(plan);
    std::vector<std::vector<block_id>> tables;
    for (size_t s = 0; s < plan.sequences.size(); ++s) {
      const std::vector<block_id>* t = tables_.table(plan.sequences[s].seq);
      REQUIRE(t != nullptr);
      tables.push_back(*t);
      if (!expected.empty())
        CHECK_MESSAGE(*t == expected.at(s), "the diffs built another table for ", to_string(plan.sequences[s].seq));
      blocks_shipped += plan.sequences[s].blocks.size();
      blocks_whole += t->size();
      new_tables += plan.sequences[s].new_table ? 1 : 0;
    }
    const std::string invalid = validate(plan, tables, block_size_, n_blocks_);
    REQUIRE_MESSAGE(invalid.empty(), invalid);
    std::vector<size_t> seq_of_row(static_cast<size_t>(plan.n_tokens()));
    for (size_t s = 0; s < plan.sequences.size(); ++s) {
      const auto& seq = plan.sequences[s];
      for (int32_t r = seq.query_begin; r < seq.query_begin + seq.n_query; ++r) {
        const int32_t pos = plan.positions[static_cast<size_t>(r)];
        const uint64_t previous = pos == 0 ? kv_seed : slot(tables[s], pos - 1);
        CHECK_MESSAGE(previous != unwritten, "position ", pos - 1, " is read before any step wrote it");
        slot(tables[s], pos) = next_kv(previous, plan.tokens[static_cast<size_t>(r)]);
        seq_of_row[static_cast<size_t>(r)] = s;
      }
    }
    std::vector<int32_t> sampled;
    for (size_t i = 0; i < plan.sample_rows.size(); ++i) {
      const int32_t row = plan.sample_rows[i];
      const size_t s = seq_of_row[static_cast<size_t>(row)];
      const int32_t pos = plan.positions[static_cast<size_t>(row)];
      sampled.push_back(sample_from(slot(tables[s], pos), salted_ ? plan.sample_seqs[i].index : 0, vocab_));
    }
    return sampled;
  }

  /// The block tables the diffs built.
  const shard_tables& tables() const { return tables_; }
  /// Requests whose sampler state the plans created and did not release.
  const std::set<uint64_t>& sampler_requests() const { return samplers_; }

  size_t blocks_shipped = 0;  ///< block ids the plans carried
  size_t blocks_whole = 0;    ///< block ids of the whole tables they stood for
  size_t new_tables = 0;      ///< tables sent whole

 private:
  static constexpr uint64_t unwritten = 0;

  /// The sampler shard's bookkeeping: releases, then setups; every sampled or scored request must have its state.
  void apply_samplers(const step_plan& plan) {
    for (uint64_t id : plan.released_requests)
      CHECK_MESSAGE(samplers_.erase(id) == 1, "request ", id, " released without a setup");
    for (const auto& setup : plan.new_requests)
      CHECK_MESSAGE(samplers_.insert(setup.request_id).second, "request ", setup.request_id, " set up twice");
    for (const auto* seqs : {&plan.sample_seqs, &plan.score_seqs})
      for (const seq_id& seq : *seqs)
        CHECK_MESSAGE(samplers_.contains(seq.request_id), to_string(seq), " sampled before its request's setup");
  }

  uint64_t& slot(const std::vector<block_id>& table, int32_t pos) {
    return cache_[static_cast<size_t>(table[static_cast<size_t>(pos / block_size_)] * block_size_ + pos % block_size_)];
  }

  int32_t block_size_;
  int32_t n_blocks_;
  int32_t vocab_;
  bool salted_;
  std::vector<uint64_t> cache_;
  shard_tables tables_;
  std::set<uint64_t> samplers_;
};

/// Per-plan checks that hold for every plan the scheduler may hand out; `tables`: whole_tables(sched, plan).
inline void check_plan(const scheduler_core& sched, const step_plan& plan,
                       const std::vector<std::vector<block_id>>& tables) {
  const auto& cfg = sched.config();
  CHECK(plan.n_tokens() > 0);
  CHECK(plan.n_tokens() <= cfg.max_num_batched_tokens);
  CHECK(plan.sequences.size() <= static_cast<size_t>(cfg.max_num_seqs));
  CHECK(validate(plan, tables, cfg.block_size, cfg.n_blocks) == "");
  std::vector<seq_id> ids = scheduled_seqs(plan);
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  for (const auto& lora : plan.loras)
    CHECK(std::count_if(plan.loras.begin(), plan.loras.end(), [&](const lora_ref& l) { return l.id == lora.id; }) == 1);
  // A block a sequence writes this step is its own, except right after the prompt of an n > 1 request, when the
  // siblings forked in this very plan share its full blocks (one sample row per sibling). No step writes a block
  // registered in the prefix cache: registered blocks are full and their KV is final.
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    const auto& seq = plan.sequences[s];
    CHECK((seq.lora_id == 0 ||
           std::any_of(plan.loras.begin(), plan.loras.end(), [&](const lora_ref& l) { return l.id == seq.lora_id; })));
    auto last_row = seq.query_begin + seq.n_query - 1;
    auto sharers = std::count(plan.sample_rows.begin(), plan.sample_rows.end(), last_row);
    auto allowed = std::max<int64_t>(1, sharers);
    for (int32_t r = seq.query_begin; r <= last_row; ++r) {
      auto b = tables[s][static_cast<size_t>(plan.positions[static_cast<size_t>(r)] / cfg.block_size)];
      CHECK(sched.allocator().ref_count(b) >= 1);
      CHECK(sched.allocator().ref_count(b) <= allowed);
      CHECK_FALSE(sched.allocator().hash_of(b).has_value());
    }
  }
}

/// A plan handed out and not yet completed, with the sequences in it that are still live (a sequence finished or
/// aborted meanwhile may come back under the same id, as a new incarnation, in a later plan), and each sequence's
/// whole block table when it was handed out.
struct plan_in_flight {
  step_plan plan;
  std::set<seq_id> live;
  std::vector<std::vector<block_id>> tables;
};

/// Drives a scheduler with the fake model the way the engine will: up to pp_size plans in flight, results folded
/// in oldest first. Collects every sequence's output and finish reason.
struct driver {
  scheduler_core& sched;
  fake_model model;
  std::map<seq_id, std::vector<int32_t>> outputs;
  std::map<seq_id, finish_reason> finished;
  std::vector<uint64_t> finished_requests;
  std::deque<plan_in_flight> in_flight;
  std::vector<step_plan> history;  ///< every plan handed out (when keep_history)
  bool keep_history = false;
  /// Prompt scoring: every (position, token) planned per sequence, in plan order.
  std::map<seq_id, std::vector<std::pair<int32_t, int32_t>>> scores;

  driver(scheduler_core& s, int32_t vocab, bool salted = true) : sched(s), model(s.config(), vocab, salted) {}

  void apply(const std::vector<seq_event>& events) {
    for (const seq_event& e : events) {
      REQUIRE_FALSE(finished.contains(e.seq));
      if (e.new_token)
        outputs[e.seq].push_back(*e.new_token);
      if (e.finished) {
        finished[e.seq] = *e.finished;
        for (auto& p : in_flight)
          p.live.erase(e.seq);
      }
      if (e.request_finished)
        finished_requests.push_back(e.seq.request_id);
    }
  }

  /// Checks a plan the scheduler just handed out and queues it behind the plans already in flight.
  void track(step_plan plan) {
    std::vector<std::vector<block_id>> tables = whole_tables(sched, plan);
    check_plan(sched, plan, tables);
    std::set<seq_id> live;
    for (const auto& s : plan.sequences)
      live.insert(s.seq);
    live.insert(plan.sample_seqs.begin(), plan.sample_seqs.end());
    for (const auto& other : in_flight)
      for (seq_id id : live)
        CHECK_MESSAGE(!other.live.contains(id), to_string(id), " is in two plans in flight");
    // A score row is a row of its sequence at its position, scoring the token the plan names.
    REQUIRE(plan.score_seqs.size() == plan.score_rows.size());
    REQUIRE(plan.score_positions.size() == plan.score_rows.size());
    REQUIRE(plan.score_tokens.size() == plan.score_rows.size());
    for (size_t i = 0; i < plan.score_rows.size(); ++i) {
      const auto row = static_cast<size_t>(plan.score_rows[i]);
      REQUIRE(row < plan.positions.size());
      CHECK(plan.positions[row] == plan.score_positions[i]);
      scores[plan.score_seqs[i]].emplace_back(plan.score_positions[i], plan.score_tokens[i]);
    }
    if (keep_history)
      history.push_back(plan);
    in_flight.push_back({std::move(plan), std::move(live), std::move(tables)});
  }

  /// Fills the pipeline, then completes the oldest plan. False when nothing was in flight to complete.
  bool step() {
    while (auto plan = sched.schedule())
      track(std::move(*plan));
    REQUIRE_MESSAGE(sched.check_invariants() == "", sched.check_invariants());
    if (in_flight.empty())
      return false;
    plan_in_flight next = std::move(in_flight.front());
    in_flight.pop_front();
    auto sampled = model.run(next.plan, next.tables);
    auto events = sched.update_from_output(next.plan.step_id, sampled);
    REQUIRE(events.has_value());
    for (const seq_event& e : *events) {  // each event names the sample row its token came from
      REQUIRE(e.sample_row >= 0);
      REQUIRE(static_cast<size_t>(e.sample_row) < sampled.size());
      CHECK(next.plan.sample_seqs[static_cast<size_t>(e.sample_row)] == e.seq);
      CHECK(e.new_token == sampled[static_cast<size_t>(e.sample_row)]);
    }
    apply(*events);
    REQUIRE_MESSAGE(sched.check_invariants() == "", sched.check_invariants());
    return true;
  }

  /// Steps until no request is left; fails the test if that takes more than `max_steps`.
  int run_to_completion(int max_steps = 100000) {
    int steps = 0;
    while (sched.has_unfinished() || !in_flight.empty()) {
      REQUIRE(steps < max_steps);
      REQUIRE(step());
      ++steps;
    }
    return steps;
  }
};

}  // namespace actorllm::engine::test
