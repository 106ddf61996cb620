// Continuous batching: the scheduler's state machine.
#include "engine/scheduler_core.hpp"

#include "util/check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

namespace actorllm::engine {

namespace {

seq_id id_of(const std::tuple<int64_t, uint64_t, uint32_t, uint64_t>& key) {
  return seq_id{std::get<3>(key), std::get<2>(key)};
}

bool contains(const std::vector<int32_t>& ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

expected<scheduler_core> scheduler_core::create(const scheduler_config& config) {
  if (auto err = config.validate())
    return *err;
  return scheduler_core(config);
}

scheduler_core::scheduler_core(const scheduler_config& config)
    : config_(config), allocator_(config.n_blocks, config.block_size, config.enable_prefix_caching) {}

expected<void> scheduler_core::add_request(request req) {
  auto reject = [&](engine_errc code, std::string message) {
    return engine_error{code, fmt::format("request {}: {}", req.id, message)};
  };
  if (requests_.contains(req.id))
    return reject(engine_errc::duplicate_request, "a request with this id is still running");
  if (req.prompt.empty())
    return reject(engine_errc::invalid_argument, "the prompt has no tokens");
  if (req.n < 1)
    return reject(engine_errc::invalid_argument, fmt::format("n must be at least 1, got {}", req.n));
  if (req.max_tokens && *req.max_tokens < 1)
    return reject(engine_errc::invalid_argument, fmt::format("max_tokens must be at least 1, got {}", *req.max_tokens));
  if (req.min_tokens < 0)
    return reject(engine_errc::invalid_argument, fmt::format("min_tokens must be at least 0, got {}", req.min_tokens));
  if (req.cache_salt && req.cache_salt->empty())
    return reject(engine_errc::invalid_argument, "cache_salt must not be empty (leave it out for no salt)");
  if (req.lora.id < 0)
    return reject(engine_errc::invalid_argument, fmt::format("lora id must be positive, got {}", req.lora.id));
  if (req.lora.id != 0 && config_.max_loras == 0)
    return reject(engine_errc::invalid_argument,
                  "names a LoRA adapter, but LoRA is off (start the engine with enable_lora / --enable-lora)");

  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  const int64_t max_len = config_.max_model_len;
  if (req.max_tokens && n_prompt + *req.max_tokens > max_len)
    return reject(engine_errc::exceeds_max_model_len,
                  fmt::format("the prompt ({} tokens) plus max_tokens ({}) is {} tokens, over the maximum model "
                              "length of {}",
                              n_prompt, *req.max_tokens, n_prompt + *req.max_tokens, max_len));
  if (!req.max_tokens && n_prompt >= max_len)
    return reject(engine_errc::exceeds_max_model_len,
                  fmt::format("the prompt ({} tokens) leaves no room for output within the maximum model length of {}",
                              n_prompt, max_len));
  const int64_t max_tokens = req.max_tokens ? *req.max_tokens : max_len - n_prompt;
  if (req.min_tokens > max_tokens)
    return reject(engine_errc::invalid_argument,
                  fmt::format("min_tokens {} exceeds max_tokens {}", req.min_tokens, max_tokens));

  // The last output token is sampled but never fed back, so a sequence needs KV slots for all but one of its tokens.
  // Preemption can always shrink the running set down to one sequence, so one sequence fitting is the real bound.
  const int64_t n_slots = n_prompt + max_tokens - 1;
  const int64_t n_blocks_needed = (n_slots + config_.block_size - 1) / config_.block_size;
  if (n_blocks_needed > config_.n_blocks)
    return reject(engine_errc::exceeds_kv_cache,
                  fmt::format("{} prompt tokens + max_tokens {} need up to {} KV-cache slots ({} blocks of {}) but the "
                              "whole cache holds {} blocks ({} tokens)",
                              n_prompt, max_tokens, n_slots, n_blocks_needed, config_.block_size, config_.n_blocks,
                              int64_t{config_.n_blocks} * config_.block_size));
  if (req.n > config_.max_num_seqs)
    return reject(engine_errc::too_many_sequences,
                  fmt::format("n = {} output sequences exceeds max_num_seqs {}", req.n, config_.max_num_seqs));
  if (!req.resume_output.empty()) {
    if (req.n != 1)
      return reject(engine_errc::invalid_argument,
                    fmt::format("only an n = 1 request can resume from its output so far, this one has n = {}", req.n));
    if (static_cast<int64_t>(req.resume_output.size()) >= max_tokens)
      return reject(engine_errc::invalid_argument,
                    fmt::format("resumes with {} output tokens, but max_tokens {} would already have finished it",
                                req.resume_output.size(), max_tokens));
  }

  request_state state;
  state.n_prompt = static_cast<int32_t>(n_prompt);
  state.max_tokens = static_cast<int32_t>(max_tokens);
  state.arrival = next_arrival_++;
  state.n_live = req.n;
  state.extra_keys = first_block_extra_keys(req.cache_salt, req.lora.id);
  // The sampler learns the request with its first sample or score row (plan_samplers).
  sampler_setup setup;
  setup.request_id = req.id;
  if (req.sampling.params.repetition_penalty != 1.0f)
    setup.prompt_ids = req.prompt;
  setup.resume_output_ids = req.resume_output;
  setup.spec = std::move(req.sampling);
  state.setup = std::move(setup);
  seq_state seq;
  seq.id = seq_id{req.id, 0};
  seq.serial = next_serial_++;
  seq.tokens = std::move(req.prompt);
  req.prompt.clear();
  // A resumed request re-prefills its output so far with the prompt; they count as output (stop_reason).
  seq.tokens.insert(seq.tokens.end(), req.resume_output.begin(), req.resume_output.end());
  req.resume_output.clear();
  state.req = std::move(req);
  const uint64_t id = state.req.id;
  requests_.emplace(id, std::move(state));
  auto [it, inserted] = seqs_.emplace(seq.id, std::move(seq));
  ACTORLLM_CHECK(inserted, "a new request's sequence 0 already existed");
  waiting_.insert(key_of(it->second));
  return {};
}

scheduler_core::order_key scheduler_core::key_of(const seq_state& seq) const {
  const request_state& req = requests_.at(seq.id.request_id);
  int64_t rank = config_.policy == scheduling_policy::priority ? req.req.priority : 0;
  return {rank, req.arrival, seq.id.index, seq.id.request_id};
}

int32_t scheduler_core::seats_of(const seq_state& seq) const {
  // An unforked parent stands for all n sequences of its request: they will fork off it without further admission,
  // so their seats are taken when it is admitted.
  const request_state& req = requests_.at(seq.id.request_id);
  return seq.id.index == 0 && !req.forked ? req.req.n : 1;
}

void scheduler_core::enter_running(seq_state& seq) {
  ACTORLLM_CHECK(!seq.running, "sequence is already running");
  seq.running = true;
  running_.insert(key_of(seq));
  n_running_seats_ += seats_of(seq);
  if (const int32_t lora = requests_.at(seq.id.request_id).req.lora.id; lora != 0)
    ++running_loras_[lora];
}

void scheduler_core::leave_running(seq_state& seq) {
  ACTORLLM_CHECK(seq.running, "sequence is not running");
  seq.running = false;
  running_.erase(key_of(seq));
  n_running_seats_ -= seats_of(seq);
  if (const int32_t lora = requests_.at(seq.id.request_id).req.lora.id; lora != 0) {
    auto it = running_loras_.find(lora);
    ACTORLLM_CHECK(it != running_loras_.end() && it->second > 0, "a running LoRA adapter was not counted");
    if (--it->second == 0)
      running_loras_.erase(it);
  }
}

bool scheduler_core::lora_fits(const seq_state& seq) const {
  const int32_t lora = requests_.at(seq.id.request_id).req.lora.id;
  return lora == 0 || running_loras_.contains(lora) || running_loras_.size() < static_cast<size_t>(config_.max_loras);
}

std::optional<seq_id> scheduler_core::pick_victim(seq_id current) const {
  // Sequences in this plan or in an earlier one still in flight keep their blocks: the plan already refers to them.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    seq_id id = id_of(*it);
    if (id == current)
      continue;
    if (!seqs_.at(id).in_flight_step)
      return id;
  }
  return std::nullopt;
}

void scheduler_core::preempt(seq_state& seq) {
  // Recompute, not swap: drop the KV and re-prefill prompt plus output later. Its tokens stay as they are. The shards
  // drop its table with the next plan (a re-admission sends it whole).
  allocator_.free(seq.id).value();
  leave_running(seq);
  seq.n_computed = 0;
  waiting_.insert(key_of(seq));
  tables_.forget(seq.id);
  ++n_preemptions_;
}

bool scheduler_core::make_room(seq_state& seq, int64_t n_tokens, uint64_t step_id) {
  while (!allocator_.can_append(seq.id, n_tokens)) {
    if (auto victim = pick_victim(seq.id)) {
      preempt(seqs_.at(*victim));
      continue;
    }
    // Everyone else holding blocks is in a plan. When some of them are in an earlier plan still in flight (pp > 1),
    // wait a step: their blocks come back, or they become preemptible, when that result arrives, and this sequence
    // keeps its KV instead of recomputing it. Otherwise it is itself the lowest-ranked sequence left (vLLM).
    bool earlier_plan_holds_blocks = std::any_of(running_.begin(), running_.end(), [&](const order_key& key) {
      const seq_state& other = seqs_.at(id_of(key));
      return other.in_flight_step && *other.in_flight_step != step_id;
    });
    if (!earlier_plan_holds_blocks)
      preempt(seq);
    return false;
  }
  return true;
}

std::vector<block_id> scheduler_core::cached_prefix(seq_state& seq) {
  // A scored prompt runs through the model whole: a cached block's positions would have no logits.
  if (!allocator_.caching_enabled() || requests_.at(seq.id.request_id).req.score_prompt)
    return {};
  // The last token is always computed: its logits are what the step is for.
  const auto n_blocks = (seq.tokens.size() - 1) / static_cast<size_t>(config_.block_size);
  extend_block_hashes(seq.block_hashes, seq.tokens, config_.block_size, n_blocks,
                      requests_.at(seq.id.request_id).extra_keys);
  return allocator_.find_cached_prefix(std::span<const block_hash>(seq.block_hashes).first(n_blocks));
}

void scheduler_core::register_computed_blocks(seq_state& seq) {
  // Called once no plan in flight writes into the sequence: every slot it holds has its KV.
  if (!allocator_.caching_enabled())
    return;
  const auto n_full = static_cast<size_t>(seq.n_computed / config_.block_size);
  extend_block_hashes(seq.block_hashes, seq.tokens, config_.block_size, n_full,
                      requests_.at(seq.id.request_id).extra_keys);
  allocator_.cache_blocks(seq.id, std::span<const block_hash>(seq.block_hashes).first(n_full)).value();
}

void scheduler_core::schedule_chunk(seq_state& seq, int32_t n_tokens, step_plan& plan, plan_record& record) {
  // The caller reserved the slots (append_slots, or start_sequence at admission).
  const int32_t start = seq.n_computed;
  const bool last_chunk = start + n_tokens == static_cast<int32_t>(seq.tokens.size());
  const auto first_row = static_cast<int32_t>(plan.tokens.size());
  plan_scores(seq, start, n_tokens, first_row, plan);
  request_state& req = requests_.at(seq.id.request_id);
  // The rows, and the block table as a diff against what the shards hold.
  const auto chunk =
      std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(start), static_cast<size_t>(n_tokens));
  plan.tokens.insert(plan.tokens.end(), chunk.begin(), chunk.end());
  for (int32_t i = 0; i < n_tokens; ++i)
    plan.positions.push_back(start + i);
  table_delta delta = tables_.update(seq.id, allocator_.block_table(seq.id));
  plan.sequences.push_back(
      scheduled_sequence{seq.id, first_row, n_tokens, delta.new_table, std::move(delta.blocks), req.req.lora.id});
  if (const lora_ref& lora = req.req.lora;
      lora.id != 0 &&
      std::none_of(plan.loras.begin(), plan.loras.end(), [&](const lora_ref& l) { return l.id == lora.id; }))
    plan.loras.push_back(lora);
  seq.n_computed += n_tokens;
  seq.in_flight_step = plan.step_id;
  record.scheduled.push_back({seq.id, seq.serial});
  if (!last_chunk)
    return;
  plan.sample_rows.push_back(first_row + n_tokens - 1);
  plan.sample_seqs.push_back(seq.id);
  record.samples.push_back({seq.id, seq.serial});

  if (seq.id.index != 0 || req.forked || req.req.n == 1)
    return;
  // The prompt is complete: each sibling samples its own first token from the same logits row and shares the
  // prompt's full blocks (this plan writes their KV before any later plan reads it: the siblings sit in this plan
  // until its result is in). The partial last block stays sequence 0's; each sibling recomputes those tokens into a
  // block of its own along with its first decode, so no block is ever written by two sequences, or copied. Seats
  // were taken at admission, so the running seat count stays as it is.
  const int32_t row = plan.sample_rows.back();
  n_running_seats_ -= seats_of(seq);
  req.forked = true;
  n_running_seats_ += seats_of(seq);
  const auto n_full = static_cast<size_t>(seq.n_computed / config_.block_size);
  const auto full_blocks = allocator_.block_table(seq.id).first(n_full);
  const std::vector<block_id> shared(full_blocks.begin(), full_blocks.end());
  for (int32_t i = 1; i < req.req.n; ++i) {
    seq_state child;
    child.id = seq_id{seq.id.request_id, static_cast<uint32_t>(i)};
    child.serial = next_serial_++;
    child.tokens = seq.tokens;
    child.n_computed = static_cast<int32_t>(n_full) * config_.block_size;
    child.block_hashes.assign(
        seq.block_hashes.begin(),
        seq.block_hashes.begin() + static_cast<std::ptrdiff_t>(std::min(n_full, seq.block_hashes.size())));
    child.in_flight_step = plan.step_id;
    allocator_.start_sequence(child.id, shared, 0).value();
    auto [it, inserted] = seqs_.emplace(child.id, std::move(child));
    ACTORLLM_CHECK(inserted, "a forked sequence already existed");
    enter_running(it->second);
    plan.sample_rows.push_back(row);
    plan.sample_seqs.push_back(it->second.id);
    record.scheduled.push_back({it->second.id, it->second.serial});
    record.samples.push_back({it->second.id, it->second.serial});
  }
}

void scheduler_core::plan_scores(seq_state& seq, int32_t start, int32_t n_tokens, int32_t first_row, step_plan& plan) {
  const request_state& req = requests_.at(seq.id.request_id);
  if (!req.req.score_prompt || seq.id.index != 0)
    return;
  // Position p's logits score prompt token p + 1: positions [start, start + n_tokens) below n_prompt - 1, each
  // once (a recomputed prefix after a preemption is not scored again).
  const int32_t end = std::min(start + n_tokens, req.n_prompt - 1);
  for (int32_t p = std::max(start, seq.n_prompt_scored); p < end; ++p) {
    plan.score_rows.push_back(first_row + (p - start));
    plan.score_seqs.push_back(seq.id);
    plan.score_positions.push_back(p);
    plan.score_tokens.push_back(seq.tokens[static_cast<size_t>(p) + 1]);
  }
  seq.n_prompt_scored = std::max(seq.n_prompt_scored, end);
}

void scheduler_core::plan_samplers(step_plan& plan) {
  // Score rows first: a scored prompt's sampler state is needed before its first token is sampled.
  for (const auto* seqs : {&plan.score_seqs, &plan.sample_seqs}) {
    for (const seq_id& seq : *seqs) {
      request_state& req = requests_.at(seq.request_id);
      if (req.setup) {
        plan.new_requests.push_back(std::move(*req.setup));
        req.setup.reset();
        req.introduced = true;
      }
    }
  }
  plan.released_requests = std::move(releases_);
  releases_.clear();
}

std::optional<step_plan> scheduler_core::schedule() {
  if (in_flight_.size() >= static_cast<size_t>(config_.pp_size))
    return std::nullopt;
  step_plan plan;
  plan.step_id = next_step_id_;
  plan_record record;
  int64_t budget = config_.max_num_batched_tokens;
  const uint64_t preemptions_before = n_preemptions_;

  // Running sequences in policy order: decodes first so that streams keep flowing, then further prefill chunks. The
  // snapshot is needed because preemption removes entries while we walk.
  std::vector<seq_id> running;
  running.reserve(running_.size());
  for (const auto& key : running_)
    running.push_back(id_of(key));
  for (bool decodes : {true, false}) {
    for (seq_id id : running) {
      if (budget == 0)
        break;
      seq_state& seq = seqs_.at(id);
      if (!seq.running || seq.in_flight_step)
        continue;
      const int64_t remaining = static_cast<int64_t>(seq.tokens.size()) - seq.n_computed;
      if ((remaining == 1) != decodes)
        continue;
      const int64_t n_tokens = std::min(remaining, budget);
      if (!make_room(seq, n_tokens, plan.step_id))
        continue;
      allocator_.append_slots(seq.id, n_tokens).value();
      schedule_chunk(seq, static_cast<int32_t>(n_tokens), plan, record);
      budget -= n_tokens;
    }
  }

  // Admit waiting sequences in policy order, without skipping (a long prompt at the head is not starved by short
  // ones behind it), except one whose LoRA adapter would be one too many: it waits for an adapter to leave while the
  // ones behind it go ahead (as in vLLM). Not in a step that preempted: the freed blocks would go straight back to
  // the waiting queue and the step would thrash, as vLLM v1 also avoids.
  if (n_preemptions_ == preemptions_before) {
    auto next = waiting_.begin();
    while (budget > 0 && next != waiting_.end()) {
      seq_state& seq = seqs_.at(id_of(*next));
      if (!lora_fits(seq)) {
        ++next;
        continue;
      }
      if (n_running_seats_ + seats_of(seq) > config_.max_num_seqs)
        break;
      const std::vector<block_id> hit = cached_prefix(seq);
      const int32_t n_hit_tokens = static_cast<int32_t>(hit.size()) * config_.block_size;
      const int64_t n_tokens = std::min(static_cast<int64_t>(seq.tokens.size()) - n_hit_tokens, budget);
      if (!allocator_.can_start(hit, n_tokens))
        break;
      next = waiting_.erase(next);
      enter_running(seq);
      allocator_.start_sequence(seq.id, hit, n_tokens).value();
      seq.n_computed = n_hit_tokens;
      request_state& req = requests_.at(seq.id.request_id);
      if (seq.id.index == 0 && !req.admitted) {
        // A new request (not a preempted one coming back): what usage and the hit-rate metric report.
        req.admitted = true;
        req.n_cached_tokens = n_hit_tokens;
        if (allocator_.caching_enabled()) {
          n_prefix_queries_ += seq.tokens.size();
          n_prefix_hits_ += static_cast<uint64_t>(n_hit_tokens);
        }
      }
      schedule_chunk(seq, static_cast<int32_t>(n_tokens), plan, record);
      budget -= n_tokens;
    }
  }

  if (plan.sequences.empty()) {
    // Nothing runs; preemptions made here still happened (and are counted), and the next plan drops their tables.
    return std::nullopt;
  }
  plan.dropped_seqs = tables_.take_dropped();
  plan_samplers(plan);
  ++next_step_id_;
  in_flight_.emplace(plan.step_id, std::move(record));
  return plan;
}

std::optional<finish_reason> scheduler_core::stop_reason(const seq_state& seq, const request_state& req,
                                                         int32_t token) const {
  const int64_t n_output = static_cast<int64_t>(seq.tokens.size()) - req.n_prompt;
  if (n_output >= req.req.min_tokens) {
    if (!req.req.ignore_eos && contains(req.req.eos_token_ids, token))
      return finish_reason::stop;
    if (contains(req.req.stop_token_ids, token))
      return finish_reason::stop;
  }
  if (n_output >= req.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= config_.max_model_len)
    return finish_reason::length;
  return std::nullopt;
}

expected<std::vector<seq_event>> scheduler_core::update_from_output(uint64_t step_id,
                                                                    std::span<const int32_t> sampled) {
  auto rec_it = in_flight_.find(step_id);
  if (rec_it == in_flight_.end())
    return engine_error{
        engine_errc::unknown_step,
        fmt::format("step {} is not in flight (its result came already, or it never existed)", step_id)};
  if (sampled.size() != rec_it->second.samples.size())
    return engine_error{engine_errc::result_mismatch,
                        fmt::format("step {} sampled {} tokens but its plan has {} sample rows", step_id,
                                    sampled.size(), rec_it->second.samples.size())};
  plan_record record = std::move(rec_it->second);
  in_flight_.erase(rec_it);

  auto live = [this](const tagged_seq& tagged) -> seq_state* {
    auto it = seqs_.find(tagged.id);
    return it != seqs_.end() && it->second.serial == tagged.serial ? &it->second : nullptr;
  };
  for (const tagged_seq& tagged : record.scheduled)
    if (seq_state* seq = live(tagged)) {
      seq->in_flight_step.reset();
      register_computed_blocks(*seq);
    }

  std::vector<seq_event> events;
  events.reserve(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    seq_state* seq = live(record.samples[i]);
    if (!seq)
      continue;  // aborted or finished while the step ran
    const int32_t token = sampled[i];
    seq->tokens.push_back(token);
    auto reason = stop_reason(*seq, requests_.at(seq->id.request_id), token);
    const auto row = static_cast<int32_t>(i);
    if (!reason) {
      events.push_back(
          seq_event{seq->id, token, std::nullopt, false, requests_.at(seq->id.request_id).n_cached_tokens, row});
      continue;
    }
    seq_event event = finish_live(seqs_.find(seq->id), *reason);
    event.new_token = token;
    event.sample_row = row;
    events.push_back(event);
  }
  return events;
}

seq_event scheduler_core::finish_live(std::map<seq_id, seq_state>::iterator it, finish_reason reason) {
  seq_state& seq = it->second;
  request_state& req = requests_.at(seq.id.request_id);
  if (seq.running) {
    allocator_.free(seq.id).value();
    leave_running(seq);
  } else {
    waiting_.erase(key_of(seq));
  }
  // The shards drop its table with the next plan.
  tables_.forget(seq.id);
  // An unforked parent takes its never-created siblings with it.
  req.n_live -= seats_of(seq);
  seq_event event{seq.id, std::nullopt, reason, false, req.n_cached_tokens};
  seqs_.erase(it);
  if (req.n_live == 0) {
    // The sampler shard drops the request's state with the next plan, if a plan ever created it.
    if (req.introduced)
      releases_.push_back(event.seq.request_id);
    requests_.erase(event.seq.request_id);
    event.request_finished = true;
  }
  return event;
}

expected<std::vector<seq_event>> scheduler_core::finish_sequence(seq_id seq, finish_reason reason) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return engine_error{engine_errc::unknown_sequence,
                        fmt::format("sequence {} is not live (finished, aborted, or never added)", to_string(seq))};
  return std::vector<seq_event>{finish_live(it, reason)};
}

expected<std::vector<seq_event>> scheduler_core::finish_request(uint64_t request_id, finish_reason reason) {
  if (!requests_.contains(request_id))
    return engine_error{engine_errc::unknown_request,
                        fmt::format("request {} is not live (finished, aborted, or never added)", request_id)};
  std::vector<seq_event> events;
  auto it = seqs_.lower_bound(seq_id{request_id, 0});
  while (it != seqs_.end() && it->first.request_id == request_id) {
    auto next = std::next(it);
    events.push_back(finish_live(it, reason));
    it = next;
  }
  ACTORLLM_CHECK(!events.empty() && events.back().request_finished, "a live request had no live sequence left");
  return events;
}

std::vector<seq_event> scheduler_core::abort_all() {
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, req] : requests_)
    ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<seq_event> events;
  for (uint64_t id : ids) {
    auto aborted = abort(id);
    events.insert(events.end(), aborted->begin(), aborted->end());
  }
  return events;
}

std::span<const int32_t> scheduler_core::tokens(seq_id seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return {};
  return it->second.tokens;
}

std::string scheduler_core::check_invariants() const {
  if (auto err = allocator_.check_invariants(); !err.empty())
    return "block pool: " + err;
  int64_t seats = 0;
  size_t n_running = 0;
  std::map<uint64_t, int32_t> live_per_request;
  for (const auto& [id, seq] : seqs_) {
    auto req_it = requests_.find(id.request_id);
    if (req_it == requests_.end())
      return fmt::format("sequence {} outlived its request", to_string(id));
    const request_state& req = req_it->second;
    live_per_request[id.request_id] += seats_of(seq);
    const int64_t n_tokens = static_cast<int64_t>(seq.tokens.size());
    if (seq.n_computed < 0 || seq.n_computed > n_tokens)
      return fmt::format("sequence {} computed {} of {} tokens", to_string(id), seq.n_computed, n_tokens);
    if (n_tokens > config_.max_model_len || n_tokens - req.n_prompt > req.max_tokens)
      return fmt::format("sequence {} has {} tokens, past its limits", to_string(id), n_tokens);
    if (seq.in_flight_step && !in_flight_.contains(*seq.in_flight_step))
      return fmt::format("sequence {} is marked in flight in step {}, which is not", to_string(id),
                         *seq.in_flight_step);
    if (seq.running) {
      ++n_running;
      seats += seats_of(seq);
      if (!running_.contains(key_of(seq)) || waiting_.contains(key_of(seq)))
        return fmt::format("running sequence {} is not (only) in the running set", to_string(id));
      if (!allocator_.contains(id) || allocator_.n_tokens(id) != seq.n_computed)
        return fmt::format("running sequence {} computed {} tokens but holds {} slots", to_string(id), seq.n_computed,
                           allocator_.n_tokens(id));
      if (!seq.in_flight_step && seq.n_computed >= n_tokens)
        return fmt::format("running sequence {} is idle with nothing to compute", to_string(id));
    } else {
      if (!waiting_.contains(key_of(seq)) || running_.contains(key_of(seq)))
        return fmt::format("waiting sequence {} is not (only) in the waiting queue", to_string(id));
      if (allocator_.contains(id) || seq.n_computed != 0 || seq.in_flight_step)
        return fmt::format("waiting sequence {} holds KV state", to_string(id));
    }
  }
  if (n_running != running_.size() || seqs_.size() - n_running != waiting_.size())
    return fmt::format("queues hold {} running and {} waiting, sequences say {} and {}", running_.size(),
                       waiting_.size(), n_running, seqs_.size() - n_running);
  if (allocator_.n_sequences() != n_running)
    return fmt::format("{} sequences hold blocks but {} are running", allocator_.n_sequences(), n_running);
  if (seats != n_running_seats_ || seats > config_.max_num_seqs)
    return fmt::format("running seats: counted {}, recorded {}, max_num_seqs {}", seats, n_running_seats_,
                       config_.max_num_seqs);
  for (const auto& [rid, req] : requests_)
    if (live_per_request[rid] != req.n_live)
      return fmt::format("request {} records {} live sequences but has {}", rid, req.n_live, live_per_request[rid]);
  if (in_flight_.size() > static_cast<size_t>(config_.pp_size))
    return fmt::format("{} plans in flight, more than pp_size {}", in_flight_.size(), config_.pp_size);
  // The shards hold tables of running sequences only, each as the allocator holds it (only a plan scheduling the
  // sequence changes its table, and that plan brings the shards' copy up to date).
  size_t n_held = 0;
  for (const auto& [id, seq] : seqs_) {
    const std::vector<block_id>* held = tables_.table(id);
    if (!held)
      continue;
    ++n_held;
    if (!seq.running)
      return fmt::format("the shards hold a table of sequence {}, which is waiting", to_string(id));
    const auto table = allocator_.block_table(id);
    if (!std::equal(held->begin(), held->end(), table.begin(), table.end()))
      return fmt::format("the shards' table of sequence {} is not its table in the block pool", to_string(id));
  }
  if (n_held != tables_.size())
    return fmt::format("the shards hold {} tables of sequences that are gone", tables_.size() - n_held);
  return {};
}

}  // namespace actorllm::engine
