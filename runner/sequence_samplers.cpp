// The sampler shard's per-sequence state.
#include "runner/sequence_samplers.hpp"
#include "text/structured/constraint_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::runner {

bool reasoning_ended(std::span<const int32_t> ids, int32_t start_token, int32_t end_token) {
  if (end_token < 0)
    return false;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    if (*it == end_token)
      return true;
    if (*it == start_token)
      return false;
  }
  return false;
}

sequence_samplers::sequence sequence_samplers::new_sequence(const request& req, uint64_t seed) {
  sequence s{ops::sampler_rng{seed}, {}};
  if (req.constraint)
    s.constraint_state = req.constraint->start();
  s.constrained = req.reasoning_end_token < 0;
  return s;
}

void sequence_samplers::record(const request& req, sequence& s, int32_t token) {
  s.output_ids.push_back(token);
  if (!req.constraint)
    return;
  if (s.constrained)
    s.constraint_state = req.constraint->advance(s.constraint_state, token);
  else if (token == req.reasoning_end_token)
    s.constrained = true;  // the reasoning ended: the constraint applies from the next token on
}

void sequence_samplers::apply(const engine::step_plan& plan) {
  release(plan.released_requests);
  for (const auto& setup : plan.new_requests) {
    add(setup.request_id, setup.spec.params, setup.spec.seed, setup.prompt_ids);
    if (!setup.spec.structured_pattern.empty())
      constrain(setup.request_id, setup.spec.structured_pattern);
    if (setup.spec.reasoning_end_token_id >= 0)
      constrain_after(setup.request_id, setup.spec.reasoning_end_token_id);
    if (!setup.spec.logprob_token_ids.empty())
      report_token_logprobs(setup.request_id, setup.spec.logprob_token_ids);
    if (!setup.resume_output_ids.empty())
      resume(setup.request_id, setup.resume_output_ids);
  }
}

void sequence_samplers::report_token_logprobs(uint64_t request_id, std::vector<int32_t> token_ids) {
  if (auto it = requests_.find(request_id); it != requests_.end())
    it->second.logprob_token_ids = std::move(token_ids);
}

void sequence_samplers::resume(uint64_t request_id, std::span<const int32_t> output_ids) {
  auto it = requests_.find(request_id);
  if (it == requests_.end())
    return;
  request& req = it->second;
  sequence s = new_sequence(req, ops::sequence_seed(req.seed, 0));
  if (req.params.draws_random())
    for (size_t i = 0; i < output_ids.size(); ++i)
      (void)s.rng.uniform();
  // The same walk as sampling them here: a constraint after a reasoning part starts after its end token.
  for (int32_t token : output_ids)
    record(req, s, token);
  req.seqs.insert_or_assign(0u, std::move(s));
}

void sequence_samplers::add(uint64_t request_id, const ops::sampling_params& params, uint64_t seed,
                            std::vector<int32_t> prompt_ids) {
  request r;
  r.params = params;
  r.seed = seed;
  r.prompt_ids = std::move(prompt_ids);
  requests_.insert_or_assign(request_id, std::move(r));
}

void sequence_samplers::constrain(uint64_t request_id, const std::string& pattern) {
  auto it = requests_.find(request_id);
  if (it == requests_.end())
    return;
  if (tokenizer_.empty()) {
    it->second.constraint_error = "this sampler was built without a tokenizer";
    return;
  }
  try {
    // In the server's process the HTTP layer compiled this pattern under --max-structured-output-* and holds it
    // while the request runs, so this is a cache hit; elsewhere (a cluster worker) it compiles under the default
    // limits: bounded either way.
    it->second.constraint = text::structured::compiled_constraint(tokenizer_, pattern);
  } catch (const std::exception& e) {
    it->second.constraint_error = e.what();
  }
}

void sequence_samplers::constrain_after(uint64_t request_id, int32_t end_token) {
  auto it = requests_.find(request_id);
  if (it == requests_.end())
    return;
  it->second.reasoning_end_token = end_token;
}

void sequence_samplers::release(std::span<const uint64_t> request_ids) {
  for (uint64_t id : request_ids)
    requests_.erase(id);
}

step_result sequence_samplers::sample(const engine::step_plan& plan, backend& be, const tensor& all_logits) {
  step_result result;
  result.step_id = plan.step_id;
  const size_t n_rows = plan.sample_seqs.size(), n_scores = plan.score_rows.size();
  if (n_rows + n_scores == 0)
    return result;
  if (all_logits.empty() || all_logits.shape.n_dims != 2 ||
      all_logits.dim(0) != static_cast<int64_t>(n_rows + n_scores) || plan.score_seqs.size() != n_scores ||
      plan.score_positions.size() != n_scores || plan.score_tokens.size() != n_scores) {
    result.error = fmt::format("step {}: logits {} for {} sample rows and {} score rows", plan.step_id,
                               all_logits.empty() ? std::string("(none)") : all_logits.describe(), n_rows, n_scores);
    return result;
  }
  // Scored first: sampling uses its rows as scratch, the score rows after them are left alone.
  if (n_scores > 0) {
    if (auto err = score(plan, be, all_logits.slice_rows(static_cast<int64_t>(n_rows), static_cast<int64_t>(n_scores)),
                         result.prompt_scores);
        !err.empty()) {
      result.error = std::move(err);
      return result;
    }
  }
  if (n_rows == 0)
    return result;
  const tensor logits = all_logits.slice_rows(0, static_cast<int64_t>(n_rows));
  rows_.clear();
  row_seqs_.clear();
  for (size_t i = 0; i < n_rows; ++i) {
    const engine::seq_id seq = plan.sample_seqs[i];
    auto req = requests_.find(seq.request_id);
    if (req == requests_.end()) {
      result.error = fmt::format("step {}: no sampler state for request {} (its setup never arrived)", plan.step_id,
                                 seq.request_id);
      return result;
    }
    auto it = req->second.seqs.find(seq.index);
    if (it == req->second.seqs.end())
      it = req->second.seqs
               .emplace(seq.index, new_sequence(req->second, ops::sequence_seed(req->second.seed, seq.index)))
               .first;
    sequence& s = it->second;
    if (!req->second.constraint_error.empty()) {
      result.error = fmt::format("step {}: request {}: structured outputs: {}", plan.step_id, seq.request_id,
                                 req->second.constraint_error);
      return result;
    }
    ops::sample_row row{&req->second.params, req->second.prompt_ids, s.output_ids, &s.rng};
    if (const auto& c = req->second.constraint; c && s.constrained) {
      const std::vector<uint64_t>& mask = c->mask(s.constraint_state);
      const auto words = static_cast<size_t>((logits.dim(1) + 63) / 64);
      if (mask.size() >= words) {
        row.allowed_mask = mask.data();
      } else {  // the model's vocabulary is wider than the tokenizer's: the extra ids stay masked out
        padded_masks_.resize(rows_.size() + 1);
        auto& padded = padded_masks_[rows_.size()];
        padded.assign(words, 0);
        std::copy(mask.begin(), mask.end(), padded.begin());
        row.allowed_mask = padded.data();
      }
    }
    rows_.push_back(row);
    row_seqs_.push_back(&s);
  }
  if (auto err = listed_token_logprobs(plan, be, logits); !err.empty()) {
    result.error = std::move(err);
    return result;
  }
  // Two rows of one sequence in one step would share a generator and an output list: the scheduler never plans it.
  results_.resize(n_rows);
  be.sample(logits, rows_, results_);
  result.tokens.reserve(n_rows);
  for (size_t i = 0; i < n_rows; ++i) {
    ops::sample_result& r = results_[i];
    const auto& req = requests_.find(plan.sample_seqs[i].request_id)->second;
    record(req, *row_seqs_[i], r.token);
    sampled_token tok;
    tok.token = r.token;
    tok.logprob = r.logprob;
    const auto& top = req.logprob_token_ids.empty() ? r.top : token_logprobs_[i];
    tok.top.reserve(top.size());
    for (const auto& t : top)
      tok.top.push_back({t.token, t.logprob});
    result.tokens.push_back(std::move(tok));
  }
  return result;
}

std::string sequence_samplers::listed_token_logprobs(const engine::step_plan& plan, backend& be, const tensor& logits) {
  const int64_t n_vocab = logits.dim(1);
  token_logprobs_.resize(plan.sample_seqs.size());
  for (size_t i = 0; i < plan.sample_seqs.size(); ++i) {
    token_logprobs_[i].clear();
    const request& req = requests_.find(plan.sample_seqs[i].request_id)->second;  // sample() checked it is there
    if (req.logprob_token_ids.empty())
      continue;
    for (int32_t id : req.logprob_token_ids)
      if (id < 0 || id >= n_vocab)
        return fmt::format("step {}: request {} asks for the logprob of token {} outside the vocabulary of {}",
                           plan.step_id, plan.sample_seqs[i].request_id, id, n_vocab);
    row_host_.resize(static_cast<size_t>(n_vocab));
    be.download(logits.slice_rows(static_cast<int64_t>(i), 1), row_host_.data(), row_host_.size() * sizeof(float));
    token_logprobs_[i] = ops::logprobs_of_tokens(row_host_, req.logprob_token_ids);
  }
  return {};
}

std::string sequence_samplers::score(const engine::step_plan& plan, backend& be, const tensor& logits,
                                     std::vector<prompt_score>& out) {
  const int64_t n_vocab = logits.dim(1);
  const auto n = static_cast<size_t>(logits.dim(0));
  score_host_.resize(n * static_cast<size_t>(n_vocab));
  be.download(logits, score_host_.data(), score_host_.size() * sizeof(float));
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const engine::seq_id seq = plan.score_seqs[i];
    auto req = requests_.find(seq.request_id);
    if (req == requests_.end())
      return fmt::format("step {}: no sampler state for request {} (its setup never arrived)", plan.step_id,
                         seq.request_id);
    const int32_t token = plan.score_tokens[i];
    if (token < 0 || token >= n_vocab)
      return fmt::format("step {}: request {} scores token {} outside the vocabulary of {}", plan.step_id,
                         seq.request_id, token, n_vocab);
    const ops::row_logprobs lp = ops::logprobs_of(
        std::span<const float>(score_host_).subspan(i * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)),
        token, std::max(req->second.params.prompt_logprobs, 0));
    prompt_score s;
    s.seq = seq;
    s.position = plan.score_positions[i];
    s.token = token;
    s.logprob = lp.logprob;
    s.rank = lp.rank;
    s.top.reserve(lp.top.size());
    for (const auto& t : lp.top)
      s.top.push_back({t.token, t.logprob});
    out.push_back(std::move(s));
  }
  return {};
}

std::span<const int32_t> sequence_samplers::outputs(engine::seq_id seq) const {
  auto req = requests_.find(seq.request_id);
  if (req == requests_.end())
    return {};
  auto it = req->second.seqs.find(seq.index);
  if (it == req->second.seqs.end())
    return {};
  return it->second.output_ids;
}

}  // namespace actorllm::runner
