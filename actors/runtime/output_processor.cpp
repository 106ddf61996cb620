// The engine's per-request bookkeeping.
#include "actors/runtime/output_processor.hpp"

#include "runner/sequence_samplers.hpp"
#include "text/tokenizer_error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::actors {

namespace {

bool has_id(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

}  // namespace

engine::expected<ops::sampling_spec> to_sampling_spec(const sampling_params& p, const model_limits& limits,
                                                      const text::tokenizer* tok, uint64_t request_id,
                                                      std::span<const int32_t> prompt_ids) {
  auto fail = [](std::string message) {
    return engine::engine_error{engine::engine_errc::invalid_argument, std::move(message)};
  };
  ops::sampling_spec spec;
  ops::sampling_params& k = spec.params;
  k.temperature = p.temperature;
  k.top_p = p.top_p;
  k.top_k = p.top_k < 0 ? 0 : p.top_k;
  k.min_p = p.min_p;
  k.repetition_penalty = p.repetition_penalty;
  k.presence_penalty = p.presence_penalty;
  k.frequency_penalty = p.frequency_penalty;
  k.logprobs = p.logprobs ? *p.logprobs : -1;
  // logprob_token_ids replace the top logprobs: the backend computes only the sampled token's.
  if (!p.logprob_token_ids.empty())
    k.logprobs = std::min(k.logprobs, 0);
  k.prompt_logprobs = p.prompt_logprobs ? *p.prompt_logprobs : -1;
  k.allowed_token_ids = p.allowed_token_ids;
  k.logit_bias = p.logit_bias;
  if (p.min_tokens > 0) {
    // vLLM masks the stop tokens until min_tokens are out (the scheduler, too, never stops a sequence before).
    k.min_tokens = p.min_tokens;
    if (!p.ignore_eos)
      k.min_tokens_stop_ids = limits.eos_token_ids;
    k.min_tokens_stop_ids.insert(k.min_tokens_stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  }
  if (!p.bad_words.empty() && !tok)
    return fail("bad_words need a tokenizer, and this model has none");
  for (const std::string& word : p.bad_words) {
    // As vLLM: the word as is and with a leading space (how it reads inside a text), each tokenized alone.
    for (const std::string& form : {word, " " + word}) {
      std::vector<int32_t> ids = tok->encode(form, /*add_special_tokens=*/false);
      if (!ids.empty() && std::find(k.bad_words.begin(), k.bad_words.end(), ids) == k.bad_words.end())
        k.bad_words.push_back(std::move(ids));
    }
  }
  spec.seed = p.seed ? *p.seed : ops::default_request_seed(limits.seed, request_id);
  spec.logprob_token_ids = p.logprob_token_ids;
  if (!p.structured_pattern.empty()) {
    if (!tok)
      return fail("structured outputs need a tokenizer, and this model has none");
    spec.structured_pattern = p.structured_pattern;
    if (p.reasoning_end_token_id >= limits.n_vocab || p.reasoning_start_token_id >= limits.n_vocab)
      return fail(fmt::format("the reasoning's start/end token ids ({}, {}) are outside the vocabulary of {}",
                              p.reasoning_start_token_id, p.reasoning_end_token_id, limits.n_vocab));
    // As vLLM's reasoners: the prompt ended the reasoning when the end token follows the last start token in it
    // (Qwen3 with thinking off renders "<think>\n\n</think>\n\n" into the generation prompt).
    if (p.reasoning_end_token_id >= 0 &&
        !runner::reasoning_ended(prompt_ids, p.reasoning_start_token_id, p.reasoning_end_token_id))
      spec.reasoning_end_token_id = p.reasoning_end_token_id;
  }
  return spec;
}

output_processor::output_processor(std::optional<text::tokenizer> tok, model_limits limits)
    : tok_(std::move(tok)), limits_(std::move(limits)) {
  if (limits_.eos_token_ids.empty() && tok_ && tok_->eos_id())
    limits_.eos_token_ids.push_back(*tok_->eos_id());
}

engine::expected<proto::request_spec> output_processor::add(const proto::submit_request& req) {
  using engine::engine_errc;
  auto fail = [&](engine_errc code, std::string message) {
    return engine::engine_error{code, fmt::format("request {}: {}", req.request_id, message)};
  };
  if (requests_.contains(req.request_id))
    return fail(engine_errc::duplicate_request, "a request with this id is still running");
  if (auto err = validate(req.params); !err.empty())
    return fail(engine_errc::invalid_argument, err);
  if (req.cache_salt && req.cache_salt->empty())
    return fail(engine_errc::invalid_argument, "cache_salt must not be empty (leave it out for no salt)");
  if (!req.params.stop.empty() && !tok_)
    return fail(engine_errc::invalid_argument, "stop strings need a tokenizer, and this model has none");
  if (!req.params.bad_words.empty() && !tok_)
    return fail(engine_errc::invalid_argument, "bad_words need a tokenizer, and this model has none");
  for (const auto& [id, bias] : req.params.logit_bias)
    if (id >= limits_.n_vocab)
      return fail(engine_errc::invalid_argument,
                  fmt::format("logit_bias token id {} is outside the vocabulary of {}", id, limits_.n_vocab));
  for (int32_t id : req.params.allowed_token_ids)
    if (id >= limits_.n_vocab)
      return fail(engine_errc::invalid_argument,
                  fmt::format("allowed_token_ids: token id {} is outside the vocabulary of {}", id, limits_.n_vocab));
  for (int32_t id : req.params.logprob_token_ids)
    if (id >= limits_.n_vocab)
      return fail(engine_errc::invalid_argument,
                  fmt::format("logprob_token_ids: token id {} is outside the vocabulary of {}", id, limits_.n_vocab));

  std::vector<int32_t> prompt_ids;
  if (req.prompt_is_tokens) {
    prompt_ids = req.prompt_ids;
  } else {
    if (!tok_)
      return fail(engine_errc::invalid_argument,
                  "a text prompt needs a tokenizer, and this model has none (give token ids)");
    try {
      prompt_ids = tok_->encode(req.prompt_text, /*add_special_tokens=*/true);
    } catch (const text::tokenizer_error& e) {
      return fail(engine_errc::invalid_argument, fmt::format("the prompt cannot be tokenized: {}", e.what()));
    }
  }
  if (prompt_ids.empty())
    return fail(engine_errc::invalid_argument, "the prompt is empty");
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= limits_.n_vocab)
      return fail(engine_errc::invalid_argument,
                  fmt::format("prompt token id {} is outside the vocabulary of {}", id, limits_.n_vocab));
  // The context length is the scheduler core's check (engine::scheduler_core::add_request), the only one.

  if (!req.resume_tokens.empty()) {
    if (req.params.n != 1)
      return fail(
          engine_errc::invalid_argument,
          fmt::format("only an n = 1 request can resume from its output so far, this one has n = {}", req.params.n));
    for (const auto& t : req.resume_tokens)
      if (t.token < 0 || t.token >= limits_.n_vocab)
        return fail(engine_errc::invalid_argument,
                    fmt::format("resumed token id {} is outside the vocabulary of {}", t.token, limits_.n_vocab));
    const int64_t n_prompt = static_cast<int64_t>(prompt_ids.size()), max_len = limits_.max_model_len;
    if (n_prompt + static_cast<int64_t>(req.resume_tokens.size()) >= max_len)
      return fail(engine_errc::invalid_argument,
                  fmt::format("resumes with {} output tokens after {} prompt tokens: already at the maximum model "
                              "length of {}",
                              req.resume_tokens.size(), n_prompt, max_len));
  }

  const sampling_params& p = req.params;
  proto::request_spec spec;
  spec.request_id = req.request_id;
  spec.prompt_ids = prompt_ids;
  spec.max_tokens = p.max_tokens;
  spec.n = p.n;
  spec.priority = req.priority;
  spec.eos_token_ids = limits_.eos_token_ids;
  spec.ignore_eos = p.ignore_eos;
  spec.stop_token_ids = p.stop_token_ids;
  spec.min_tokens = p.min_tokens;
  spec.cache_salt = req.cache_salt;
  spec.lora = req.lora;
  auto sampling = to_sampling_spec(p, limits_, tok_ ? &*tok_ : nullptr, req.request_id, prompt_ids);
  if (!sampling)
    return fail(sampling.error().code, sampling.error().message);
  spec.sampling = std::move(*sampling);

  request_state state;
  state.id = req.request_id;
  state.prompt_text = req.prompt_text;  // also with ids: a front end that tokenized the text keeps it for the output
  state.prompt_ids = std::move(prompt_ids);
  state.params = p;
  state.stream = req.stream;
  state.n_unfinished = p.n;
  if (p.prompt_logprobs)
    state.prompt_logprobs.resize(state.prompt_ids.size() > 0 ? state.prompt_ids.size() - 1 : 0);
  state.seqs.resize(static_cast<size_t>(p.n));
  // One stop-string automaton per request: the n sequences' matchers share it.
  std::optional<text::stop_string_matcher> matcher;
  if (!p.stop.empty())
    matcher.emplace(p.stop, p.include_stop_str_in_output);
  for (int32_t i = 0; i < p.n; ++i) {
    seq_state& s = state.seqs[static_cast<size_t>(i)];
    s.out.index = static_cast<uint32_t>(i);
    if (tok_)
      s.detok.emplace(*tok_, state.prompt_ids, p.skip_special_tokens);
    s.matcher = matcher;
  }
  if (!req.resume_tokens.empty()) {
    // Replayed through the same detokenizer and stop-string matcher the dead replica ran them through: the text
    // they make is what its deltas already carried, and what is held back is held back again.
    seq_state& s = state.seqs.front();
    for (const sample_logprobs& t : req.resume_tokens) {
      s.out.token_ids.push_back(t.token);
      s.out.cumulative_logprob += t.logprob;
      if (p.logprobs)
        s.out.logprobs.push_back(t);
      std::string piece = s.detok ? s.detok->push(t.token) : std::string{};
      if (s.matcher) {
        auto m = s.matcher->push(piece);
        if (m.stop_index)
          return fail(engine_errc::invalid_argument, "the resumed output already ends in a stop string");
        piece = std::move(m.text);
      }
      s.out.text += piece;
      spec.resume_output_ids.push_back(t.token);
    }
  }
  requests_.emplace(req.request_id, std::move(state));
  return spec;
}

bool output_processor::streams(uint64_t request_id) const {
  auto it = requests_.find(request_id);
  return it != requests_.end() && it->second.stream;
}

std::vector<uint64_t> output_processor::request_ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, req] : requests_)
    ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void output_processor::finish(request_state& req, seq_state& seq, finish_reason reason, std::string& text) {
  if (seq.out.finish_reason)
    return;
  std::string tail = seq.detok ? seq.detok->finish() : std::string{};
  if (seq.matcher) {
    auto m = seq.matcher->push(tail);
    text += m.text;
    if (m.stop_index) {
      reason = finish_reason::stop;
      seq.out.stop_string = req.params.stop[*m.stop_index];
    } else {
      text += seq.matcher->finish();
    }
  } else {
    text += tail;
  }
  seq.out.finish_reason = reason;
  --req.n_unfinished;
}

request_output output_processor::final_output(request_state& req) const {
  request_output out;
  out.request_id = req.id;
  out.prompt = std::move(req.prompt_text);
  out.prompt_token_ids = std::move(req.prompt_ids);
  out.finished = true;
  out.usage.prompt_tokens = static_cast<int32_t>(out.prompt_token_ids.size());
  out.usage.cached_tokens = req.num_cached_tokens;
  out.prompt_logprobs = std::move(req.prompt_logprobs);
  for (auto& seq : req.seqs) {
    out.usage.completion_tokens += static_cast<int32_t>(seq.out.token_ids.size());
    out.outputs.push_back(std::move(seq.out));
  }
  return out;
}

void output_processor::process(const proto::step_update& update, step_outputs& out) {
  // Prompt logprobs first: the step that scores a prompt's last chunk also samples its first token.
  for (const auto& p : update.prompts) {
    auto it = requests_.find(p.request_id);
    if (it == requests_.end() || p.position < 0 || static_cast<size_t>(p.position) >= it->second.prompt_logprobs.size())
      continue;
    it->second.prompt_logprobs[static_cast<size_t>(p.position)] = p.entry;
  }
  for (const auto& u : update.seqs) {
    auto it = requests_.find(u.request_id);
    if (it == requests_.end() || u.index >= it->second.seqs.size())
      continue;
    request_state& req = it->second;
    seq_state& seq = req.seqs[u.index];
    req.num_cached_tokens = std::max(req.num_cached_tokens, u.num_cached_tokens);
    if (seq.out.finish_reason)
      continue;
    std::string text;
    stream_delta delta;
    if (u.token) {
      const int32_t token = *u.token;
      seq.out.token_ids.push_back(token);
      seq.out.cumulative_logprob += u.logprob;
      if (req.params.logprobs)
        seq.out.logprobs.push_back({token, u.logprob, u.top});
      std::string piece = seq.detok ? seq.detok->push(token) : std::string{};
      if (seq.matcher) {
        auto m = seq.matcher->push(piece);
        text = std::move(m.text);
        if (m.stop_index) {
          seq.out.stop_string = req.params.stop[*m.stop_index];
          seq.out.finish_reason = finish_reason::stop;
          --req.n_unfinished;
          if (!u.finished)
            out.stopped.push_back({u.request_id, u.index});
        }
      } else {
        text = std::move(piece);
      }
      if (req.stream) {
        delta.token_ids.push_back(token);
        if (req.params.logprobs)
          delta.logprobs.push_back(seq.out.logprobs.back());
      }
    }
    if (u.finished && !seq.out.finish_reason) {
      if (*u.finished == finish_reason::stop && u.token) {
        const int32_t token = *u.token;
        const bool eos = !req.params.ignore_eos && has_id(limits_.eos_token_ids, token);
        if (!eos && has_id(req.params.stop_token_ids, token))
          seq.out.stop_token_id = token;
      }
      finish(req, seq, *u.finished, text);
    }
    seq.out.text += text;
    if (req.stream) {
      delta.request_id = u.request_id;
      delta.index = u.index;
      delta.text = std::move(text);
      delta.finish_reason = seq.out.finish_reason;
      out.deltas.push_back(std::move(delta));
    }
    if (req.n_unfinished == 0) {
      out.finished.push_back(final_output(req));
      requests_.erase(it);
    }
  }
}

std::optional<request_output> output_processor::abort(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end())
    return std::nullopt;
  request_state& req = it->second;
  for (auto& seq : req.seqs) {
    std::string text;
    finish(req, seq, finish_reason::abort, text);
    seq.out.text += text;
  }
  request_output out = final_output(req);
  requests_.erase(it);
  return out;
}

}  // namespace actorllm::actors
