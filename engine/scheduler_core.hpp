// Continuous batching as in vLLM v1, as a pure state machine with no actors and no model: schedule() turns the
// waiting and running sequences into the step plan the shards receive (block tables as a diff against what they
// hold, sampler state to create and to drop), update_from_output() folds the sampled tokens back in. The scheduler
// actor is a thin shell around this class.
#pragma once

#include "engine/block_allocator.hpp"
#include "engine/block_table_mirror.hpp"
#include "engine/expected.hpp"
#include "engine/request.hpp"
#include "engine/scheduler_config.hpp"
#include "engine/seq_event.hpp"
#include "engine/seq_id.hpp"
#include "engine/step_plan.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace actorllm::engine {

/// The scheduler and block manager of one replica.
///
/// Each step takes the running decodes first (one token each), then further chunks of partially prefilled
/// sequences, then admits waiting sequences, all under max_num_batched_tokens and max_num_seqs. Every scheduled
/// token gets a KV slot; when blocks run out, the lowest-ranked running sequence (last in policy order) is preempted
/// by recompute: its blocks are freed and it waits again, to re-prefill its prompt plus the tokens it had produced.
/// Sequences in a plan (this one, or one still in flight) are never preempted; when only they hold the blocks a
/// sequence needs, it preempts itself, except that with an earlier plan still in flight it just sits this step out.
/// A request with n > 1 prefills its prompt once as sequence 0; when its last prompt chunk is scheduled, the other
/// sequences are created sharing sequence 0's full prompt blocks and its sampling row, and each recomputes the
/// prompt's partial last block into a block of its own with its first decode (no block is ever copied). From then
/// on every sequence is scheduled on its own.
///
/// Prefix caching (on unless config.enable_prefix_caching is false): once a step's result is in, the full blocks it
/// computed are registered under their chained hash (engine/block_hash.hpp). Admission (of a new or a preempted
/// sequence) takes the longest run of its leading full blocks the cache holds, always leaving at least the last
/// token to compute (its logits are needed), and schedules only the rest.
class scheduler_core {
 public:
  /// A scheduler for `config`, or an error naming the unusable field.
  static expected<scheduler_core> create(const scheduler_config& config);

  /// The limits this scheduler runs under.
  const scheduler_config& config() const { return config_; }

  /// Queues a request, or rejects it with a message naming the numbers: a prompt plus max_tokens longer than
  /// max_model_len, a sequence that could not fit in the whole KV cache, n > max_num_seqs, a live duplicate id, or a
  /// malformed request. Admission order is the order of successful calls.
  expected<void> add_request(request req);

  /// The next step, or nullopt when pp_size plans are already in flight or nothing can run now. A sequence in a
  /// returned plan is not scheduled again until that plan's result has been given to update_from_output.
  ///
  /// The plan is the one the shards receive, and the plans must reach them in the order they were returned: each
  /// scheduled sequence's block table is a diff against the plans returned before (engine/block_table_mirror.hpp),
  /// dropped_seqs names the sequences finished or preempted since the last plan, new_requests carries the sampler
  /// setup of each request with its first sample or score row, released_requests the requests that ended after
  /// theirs went out, loras every adapter the plan's sequences apply.
  std::optional<step_plan> schedule();

  /// Folds in the result of step `step_id`: `sampled[i]` is the token sampled for plan.sample_seqs[i]. Appends each
  /// token, finishes sequences on eos / stop token ids (`stop`) or max_tokens / max_model_len (`length`), and frees
  /// the blocks of finished sequences at once. Results for sequences aborted or finished since the plan was made are
  /// ignored; the events come in sample-row order, each naming its row (seq_event::sample_row). Errors for a step
  /// that is not in flight or a token count that does not match the plan.
  expected<std::vector<seq_event>> update_from_output(uint64_t step_id, std::span<const int32_t> sampled);

  /// Finishes one sequence now (a stop string found by the engine's detokenizer, or an abort), freeing its blocks
  /// at once even when it is in a plan in flight (whose result for it will be ignored). Finishing sequence 0 of an
  /// n > 1 request before its prompt was prefilled finishes the whole request, as its siblings do not exist yet.
  expected<std::vector<seq_event>> finish_sequence(seq_id seq, finish_reason reason);

  /// Finishes every live sequence of a request now with `reason`, freeing their blocks at once.
  expected<std::vector<seq_event>> finish_request(uint64_t request_id, finish_reason reason);

  /// finish_request(request_id, finish_reason::abort): a client disconnect or an explicit abort.
  expected<std::vector<seq_event>> abort(uint64_t request_id) {
    return finish_request(request_id, finish_reason::abort);
  }

  /// Aborts every live request, in request id order (a failed replica, or shutdown).
  std::vector<seq_event> abort_all();

  /// Sequences holding KV blocks (decoding or part-way through their prefill), in flight or not.
  size_t n_running() const { return running_.size(); }
  /// Sequences waiting for admission (new, or preempted).
  size_t n_waiting() const { return waiting_.size(); }
  /// Live requests (at least one sequence not finished).
  size_t n_requests() const { return requests_.size(); }
  /// Whether request `request_id` is live.
  bool has_request(uint64_t request_id) const { return requests_.contains(request_id); }
  /// Whether any request is still live.
  bool has_unfinished() const { return !requests_.empty(); }
  /// Preemptions since creation (vLLM's num_preemptions counter).
  uint64_t n_preemptions() const { return n_preemptions_; }
  /// Prompt tokens looked up in the prefix cache by new requests' first admission (vLLM's prefix_cache_queries).
  uint64_t prefix_cache_queries() const { return n_prefix_queries_; }
  /// Of those, tokens found (vLLM's prefix_cache_hits).
  uint64_t prefix_cache_hits() const { return n_prefix_hits_; }
  /// Forgets every cached block (POST /reset_prefix_cache): nothing computed before is reused. Running sequences
  /// keep their blocks. Returns how many blocks were cached.
  int32_t reset_prefix_cache() { return allocator_.reset_cache(); }
  /// Step plans handed out whose results have not come back.
  size_t n_in_flight() const { return in_flight_.size(); }
  /// Fraction of KV blocks in use (kv_cache_usage_perc).
  double kv_cache_usage() const { return allocator_.usage(); }
  /// The block pool, read-only: for metrics and tests.
  const block_allocator& allocator() const { return allocator_; }
  /// The tokens of a live sequence (prompt, then output); empty when the sequence is not live.
  std::span<const int32_t> tokens(seq_id seq) const;

  /// Empty when the scheduler's books balance (see block_allocator::check_invariants, plus: every running sequence
  /// and only those hold blocks, exactly for the tokens they have scheduled; waiting ones hold none; running seats
  /// within max_num_seqs; in-flight marks match the plans in flight). For tests; O(state).
  std::string check_invariants() const;

 private:
  /// Queue order: policy rank (priority value, or 0 under fcfs), then arrival, then sequence index.
  using order_key = std::tuple<int64_t, uint64_t, uint32_t, uint64_t>;

  struct seq_state {
    seq_id id;
    uint64_t serial = 0;          ///< distinguishes incarnations of one id, so late results find no stale match
    std::vector<int32_t> tokens;  ///< prompt, then output
    int32_t n_computed = 0;       ///< tokens with KV slots, written or being written by a plan in flight
    std::vector<block_hash> block_hashes;  ///< chained digests of the leading full blocks of tokens, as far as needed
    std::optional<uint64_t> in_flight_step;
    bool running = false;
    int32_t n_prompt_scored = 0;  ///< prompt scoring: positions below this have been planned (never twice)
  };

  struct request_state {
    request req;  ///< prompt moved out into sequence 0
    int32_t n_prompt = 0;
    int32_t max_tokens = 0;  ///< effective: req.max_tokens or what max_model_len leaves
    uint64_t arrival = 0;
    bool forked = false;     ///< sequences 1 .. n-1 exist (forked when sequence 0's last prompt chunk was scheduled)
    int32_t n_live = 0;      ///< sequences not finished, counting unforked ones
    std::string extra_keys;  ///< of the first block's hash (the cache salt)
    bool admitted = false;   ///< sequence 0 was admitted once (the cache lookup that counts for usage)
    int32_t n_cached_tokens = 0;  ///< prompt tokens that lookup found
    /// The sampler setup, until a plan carries it (with the request's first sample or score row).
    std::optional<sampler_setup> setup;
    bool introduced = false;  ///< a plan carried the setup: the sampler shard holds state to release at the end
  };

  struct tagged_seq {
    seq_id id;
    uint64_t serial = 0;
  };

  /// Prompt scoring: the score rows of a chunk of `seq` at positions [start, start + n_tokens), whose first row is
  /// batch row first_row.
  void plan_scores(seq_state& seq, int32_t start, int32_t n_tokens, int32_t first_row, step_plan& plan);
  /// The plan's sampler bookkeeping: the setups of requests sampled or scored for the first time, and the releases
  /// of requests that ended since the last plan.
  void plan_samplers(step_plan& plan);

  struct plan_record {
    std::vector<tagged_seq> scheduled;
    std::vector<tagged_seq> samples;
  };

  explicit scheduler_core(const scheduler_config& config);

  order_key key_of(const seq_state& seq) const;
  int32_t seats_of(const seq_state& seq) const;
  void enter_running(seq_state& seq);
  void leave_running(seq_state& seq);
  /// Whether admitting `seq` keeps the running sequences' LoRA adapters within config.max_loras.
  bool lora_fits(const seq_state& seq) const;
  std::optional<seq_id> pick_victim(seq_id current) const;
  void preempt(seq_state& seq);
  bool make_room(seq_state& seq, int64_t n_tokens, uint64_t step_id);
  void schedule_chunk(seq_state& seq, int32_t n_tokens, step_plan& plan, plan_record& record);
  std::vector<block_id> cached_prefix(seq_state& seq);
  void register_computed_blocks(seq_state& seq);
  std::optional<finish_reason> stop_reason(const seq_state& seq, const request_state& req, int32_t token) const;
  seq_event finish_live(std::map<seq_id, seq_state>::iterator it, finish_reason reason);

  scheduler_config config_;
  block_allocator allocator_;
  std::map<seq_id, seq_state> seqs_;
  std::unordered_map<uint64_t, request_state> requests_;
  std::set<order_key> waiting_;
  std::set<order_key> running_;
  int32_t n_running_seats_ = 0;  ///< running sequences, counting each unforked n > 1 parent as its n sequences
  std::map<int32_t, int32_t> running_loras_;  ///< LoRA adapter id -> running sequences that apply it
  std::map<uint64_t, plan_record> in_flight_;
  block_table_mirror tables_;       ///< the block tables the shards hold after the plans handed out
  std::vector<uint64_t> releases_;  ///< introduced requests that ended since the last plan
  uint64_t next_step_id_ = 1;
  uint64_t next_arrival_ = 0;
  uint64_t next_serial_ = 1;
  uint64_t n_preemptions_ = 0;
  uint64_t n_prefix_queries_ = 0;
  uint64_t n_prefix_hits_ = 0;
};

}  // namespace actorllm::engine
