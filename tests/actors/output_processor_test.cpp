// The engine's bookkeeping without actors: validation and tokenization of submissions, deltas that add up to the
// final text, stop strings (which the scheduler must then be told about), stop tokens, eos, n > 1, abort.
#include "actors/runtime/output_processor.hpp"
#include "actorllm/proto/error.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

using namespace actorllm;
using actors::output_processor;

namespace {

struct fixture {
  text::tokenizer tok = text::tokenizer::from_directory(test::model_dir("stories260K"));
  output_processor proc{tok, actors::model_limits{512, 64, {2, 1}, 7}};

  proto::submit_request text_request(uint64_t id, std::string prompt, sampling_params p = {}, bool stream = true) {
    proto::submit_request r;
    r.request_id = id;
    r.prompt_text = std::move(prompt);
    r.params = std::move(p);
    r.stream = stream;
    return r;
  }

  // Feeds `ids` as the tokens of sequence (id, index) one step at a time; the scheduler finishes it on the last one
  // with `last_reason` (nullopt: not finished by the scheduler).
  output_processor::step_outputs feed(uint64_t id, uint32_t index, const std::vector<int32_t>& ids,
                                      std::optional<finish_reason> last_reason = std::nullopt) {
    output_processor::step_outputs all;
    for (size_t i = 0; i < ids.size(); ++i) {
      proto::step_update u;
      u.step_id = i + 1;
      proto::seq_update s;
      s.request_id = id;
      s.index = index;
      s.token = ids[i];
      s.logprob = -0.5f;
      if (i + 1 == ids.size())
        s.finished = last_reason;
      u.seqs.push_back(s);
      proc.process(u, all);
    }
    return all;
  }
};

// "Once upon a time, there was a little girl named Lily." after "Once upon a time" in stories260K's vocabulary.
const std::vector<int32_t> continuation{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};

}  // namespace

TEST_CASE_FIXTURE(fixture, "a submission is validated, tokenized and turned into the scheduler's request") {
  sampling_params p;
  p.max_tokens = 10;
  p.temperature = 0.5f;
  p.top_k = -1;
  p.stop_token_ids = {13};
  p.logprobs = 2;
  auto spec = proc.add(text_request(1, "Once upon a time", p));
  REQUIRE(spec);
  CHECK(spec->request_id == 1);
  CHECK(spec->prompt_ids == tok.encode("Once upon a time", true));
  CHECK(spec->prompt_ids.front() == 1);  // BOS
  CHECK(spec->max_tokens == 10);
  CHECK(spec->eos_token_ids == std::vector<int32_t>{2, 1});
  CHECK(spec->stop_token_ids == std::vector<int32_t>{13});
  CHECK(spec->sampling.params.temperature == 0.5f);
  CHECK(spec->sampling.params.top_k == 0);  // -1 and 0 both mean off
  CHECK(spec->sampling.params.logprobs == 2);
  CHECK(spec->sampling.seed == ops::default_request_seed(7, 1));
  p.seed = 99;
  auto seeded = proc.add(text_request(2, "Hi", p));
  REQUIRE(seeded);
  CHECK(seeded->sampling.seed == 99);
  CHECK(proc.size() == 2);

  auto dup = proc.add(text_request(1, "again"));
  REQUIRE(!dup);
  CHECK(dup.error().code == engine::engine_errc::duplicate_request);

  proto::submit_request ids;
  ids.request_id = 3;
  ids.prompt_is_tokens = true;
  ids.prompt_ids = {1, 600};
  auto outside = proc.add(ids);
  REQUIRE(!outside);
  CHECK(outside.error().message == "request 3: prompt token id 600 is outside the vocabulary of 512");
  ids.prompt_ids = std::vector<int32_t>(60, 5);
  CHECK(proc.add(ids).has_value());  // the context length is the scheduler core's check, not the processor's
  proc.forget(3);                    // as the engine does when the scheduler refuses it
  sampling_params bad;
  bad.top_p = 1.5f;
  auto invalid = proc.add(text_request(4, "Hi", bad));
  REQUIRE(!invalid);
  CHECK(invalid.error().code == engine::engine_errc::invalid_argument);
  CHECK(invalid.error().message.find("top_p must be in (0, 1], got 1.5") != std::string::npos);
  CHECK(proc.size() == 2);  // nothing tracked for the rejected ones

  output_processor no_tok{std::nullopt, actors::model_limits{512, 64, {}, 0}};
  auto needs_tok = no_tok.add(text_request(5, "Hi"));
  REQUIRE(!needs_tok);
  CHECK(needs_tok.error().message.find("needs a tokenizer") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "deltas carry each token and the text it made final, the output adds them up") {
  sampling_params p;
  p.logprobs = 0;
  REQUIRE(proc.add(text_request(1, "Once upon a time", p)));
  auto out = feed(1, 0, continuation, finish_reason::length);
  REQUIRE(out.deltas.size() == continuation.size());
  std::string joined;
  for (size_t i = 0; i < out.deltas.size(); ++i) {
    CHECK(out.deltas[i].token_ids == std::vector<int32_t>{continuation[i]});
    REQUIRE(out.deltas[i].logprobs.size() == 1);
    CHECK(out.deltas[i].logprobs[0].logprob == -0.5f);
    joined += out.deltas[i].text;
  }
  CHECK(!out.deltas[0].finish_reason);
  CHECK(out.deltas.back().finish_reason == finish_reason::length);
  REQUIRE(out.finished.size() == 1);
  const auto& o = out.finished[0];
  CHECK(o.outputs[0].text == ", there was a little girl named Lily.");
  CHECK(joined == o.outputs[0].text);
  CHECK(o.outputs[0].token_ids == continuation);
  CHECK(o.outputs[0].cumulative_logprob == doctest::Approx(-0.5 * continuation.size()));
  CHECK(o.usage.prompt_tokens == 5);
  CHECK(o.usage.completion_tokens == 11);
  CHECK(o.prompt == "Once upon a time");
  CHECK(out.stopped.empty());
  CHECK(proc.size() == 0);
}

TEST_CASE_FIXTURE(fixture, "a stop string ends the sequence in the engine and asks the scheduler to finish it") {
  sampling_params p;
  p.stop = {"girl", "Lily"};
  REQUIRE(proc.add(text_request(1, "Once upon a time", p)));
  auto out = feed(1, 0, continuation);
  REQUIRE(out.finished.size() == 1);
  const auto& c = out.finished[0].outputs[0];
  CHECK(c.finish_reason == finish_reason::stop);
  CHECK(c.stop_string == "girl");
  CHECK(c.text == ", there was a little ");
  CHECK(c.token_ids.size() == 8);  // "g", "ir", "l": the token that completed "girl" is kept, later ones ignored
  REQUIRE(out.stopped.size() == 1);
  CHECK(out.stopped[0] == proto::seq_ref{1, 0});

  // include_stop_str_in_output keeps it; a match on the scheduler's last token needs no finish request.
  p.include_stop_str_in_output = true;
  REQUIRE(proc.add(text_request(2, "Once upon a time", p, false)));
  auto kept = feed(2, 0, std::vector<int32_t>(continuation.begin(), continuation.begin() + 8), finish_reason::length);
  REQUIRE(kept.finished.size() == 1);
  CHECK(kept.finished[0].outputs[0].text == ", there was a little girl");
  CHECK(kept.finished[0].outputs[0].finish_reason == finish_reason::stop);
  CHECK(kept.stopped.empty());
  CHECK(kept.deltas.empty());  // not a streaming request
}

TEST_CASE_FIXTURE(fixture, "stop token ids are reported, eos is not, and text is held while a stop string may start") {
  sampling_params p;
  p.stop_token_ids = {426};
  REQUIRE(proc.add(text_request(1, "Once upon a time", p)));
  auto out = feed(1, 0, continuation, finish_reason::stop);
  REQUIRE(out.finished.size() == 1);
  CHECK(out.finished[0].outputs[0].stop_token_id == 426);
  CHECK(!out.finished[0].outputs[0].stop_string);

  REQUIRE(proc.add(text_request(2, "Once upon a time")));
  auto eos = feed(2, 0, {432, 2}, finish_reason::stop);
  REQUIRE(eos.finished.size() == 1);
  CHECK(!eos.finished[0].outputs[0].stop_token_id);
  CHECK(eos.finished[0].outputs[0].text == ",");  // eos is special: skipped in the text, kept in the ids
  CHECK(eos.finished[0].outputs[0].token_ids == std::vector<int32_t>{432, 2});

  sampling_params held;
  held.stop = {"Lily."};
  REQUIRE(proc.add(text_request(3, "Once upon a time", held)));
  // Up to "named Lily" the text "Lily" could still become the stop string, so it is held back...
  auto partial = feed(3, 0, std::vector<int32_t>(continuation.begin(), continuation.end() - 1));
  std::string so_far;
  for (const auto& d : partial.deltas)
    so_far += d.text;
  CHECK(so_far == ", there was a little girl named ");
  // ... and the "." completes it.
  auto rest = feed(3, 0, {426});
  REQUIRE(rest.finished.size() == 1);
  CHECK(rest.finished[0].outputs[0].text == ", there was a little girl named ");
}

TEST_CASE_FIXTURE(fixture,
                  "n > 1 finishes when every sequence has, abort finishes the rest, late updates are ignored") {
  sampling_params p;
  p.n = 2;
  REQUIRE(proc.add(text_request(1, "Once upon a time", p)));
  auto first = feed(1, 0, {432, 383}, finish_reason::length);
  CHECK(first.finished.empty());
  auto second = feed(1, 1, {432}, finish_reason::length);
  REQUIRE(second.finished.size() == 1);
  CHECK(second.finished[0].outputs.size() == 2);
  CHECK(second.finished[0].outputs[1].index == 1);
  CHECK(second.finished[0].usage.completion_tokens == 3);

  REQUIRE(proc.add(text_request(2, "Once upon a time", p)));
  feed(2, 0, {432, 383});
  CHECK(proc.streams(2));
  auto aborted = proc.abort(2);
  REQUIRE(aborted);
  CHECK(aborted->outputs[0].finish_reason == finish_reason::abort);
  CHECK(aborted->outputs[0].text == ", there");
  CHECK(aborted->outputs[1].finish_reason == finish_reason::abort);
  CHECK(aborted->outputs[1].token_ids.empty());
  CHECK(!proc.abort(2));
  auto late = feed(2, 0, {286});
  CHECK(late.deltas.empty());
  CHECK(late.finished.empty());
  CHECK(proc.size() == 0);
}

TEST_CASE_FIXTURE(fixture,
                  "structured outputs after a reasoning part: the sampler waits for the end token unless the "
                  "prompt ended the reasoning") {
  output_processor with_dir{tok, actors::model_limits{512, 64, {2, 1}, 7}};
  constexpr int32_t start = 400, end = 401;
  auto submit = [&](uint64_t id, std::vector<int32_t> prompt_ids, int32_t end_id, std::string pattern = "\\d\\d") {
    proto::submit_request r;
    r.request_id = id;
    r.prompt_is_tokens = true;
    r.prompt_ids = std::move(prompt_ids);
    r.params.structured_pattern = std::move(pattern);
    r.params.reasoning_start_token_id = start;
    r.params.reasoning_end_token_id = end_id;
    return with_dir.add(r);
  };
  auto thinking = submit(1, {1, 5, start, 6}, end);  // the prompt opened the reasoning (DeepSeek-R1's template)
  REQUIRE(thinking);
  CHECK(thinking->sampling.structured_pattern == "\\d\\d");
  CHECK(thinking->sampling.reasoning_end_token_id == end);
  auto plain = submit(2, {1, 5, 6}, end);  // nothing in the prompt (Qwen3 thinking: the reply opens <think>)
  REQUIRE(plain);
  CHECK(plain->sampling.reasoning_end_token_id == end);
  auto ended = submit(3, {1, start, 7, end, 8}, end);  // Qwen3 with thinking off: "<think>\n\n</think>\n\n"
  REQUIRE(ended);
  CHECK(ended->sampling.reasoning_end_token_id == -1);           // constrained from the first token
  auto reopened = submit(4, {1, start, end, 9, start, 6}, end);  // an earlier turn's reasoning, a new one open
  REQUIRE(reopened);
  CHECK(reopened->sampling.reasoning_end_token_id == end);
  auto unconstrained = submit(5, {1, 5}, end, "");
  REQUIRE(unconstrained);
  CHECK(unconstrained->sampling.reasoning_end_token_id == -1);  // nothing to gate
  auto outside = submit(6, {1, 5}, 600);
  REQUIRE(!outside);
  CHECK(outside.error().message.find("outside the vocabulary of 512") != std::string::npos);
  auto negative = submit(7, {1, 5}, -2);
  REQUIRE(!negative);
  CHECK(negative.error().message.find("reasoning_end_token_id") != std::string::npos);
}
