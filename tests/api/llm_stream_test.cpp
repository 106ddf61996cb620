// The embedding API's asynchronous side and request features: token streams awaited from C++20 coroutines (the
// provided task and sync_wait), plain callbacks, n > 1, logprobs, stop strings and stop tokens, and errors as
// exceptions with clear messages.
#include "actorllm/llm.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

using namespace actorllm;

namespace {

// One engine per test (a static one would be torn down after main returns, when CAF's actor system cannot be).
struct stories_engine {
  static engine_config config() {
    engine_config c;
    c.model = test::model_dir("stories260K").string();
    c.kv_cache_memory = size_t{4} << 20;
    c.threads = 2;
    return c;
  }
  LLM llm{config()};
};

sampling_params greedy(int32_t max_tokens) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

struct streamed {
  std::string text;
  std::vector<int32_t> ids;
  size_t n_deltas = 0;
  std::thread::id resumed_on;
  request_output output;
};

task<streamed> consume(generation_stream stream) {
  streamed s;
  while (auto delta = co_await stream.next()) {
    s.text += delta->text;
    s.ids.insert(s.ids.end(), delta->token_ids.begin(), delta->token_ids.end());
    ++s.n_deltas;
    s.resumed_on = std::this_thread::get_id();
  }
  s.output = stream.output();
  co_return s;
}

// A coroutine that awaits other coroutines: two streams side by side, then a sum.
task<size_t> two_streams(LLM& llm) {
  auto a = consume(llm.stream("Once upon a time", greedy(20)));
  auto b = consume(llm.stream("The cat", greedy(12)));
  streamed ra = co_await a;
  streamed rb = co_await b;
  co_return ra.ids.size() + rb.ids.size();
}

task<void> expect_rejection(LLM& llm) {
  sampling_params bad = greedy(8);
  bad.top_p = 0;
  auto stream = llm.stream("Hello", bad);
  CHECK_THROWS_WITH_AS(co_await stream.next(), doctest::Contains("top_p must be in (0, 1]"), error);
}

}  // namespace

TEST_CASE_FIXTURE(stories_engine,
                  "a coroutine co_awaits a token stream, the deltas add up to the final output and to generate()'s") {
  const request_output expected = llm.generate("Once upon a time", greedy(40));
  streamed s = sync_wait(consume(llm.stream("Once upon a time", greedy(40))));
  CHECK(s.ids == expected.outputs[0].token_ids);
  CHECK(s.text == expected.outputs[0].text);
  CHECK(s.output.outputs[0].text == expected.outputs[0].text);
  CHECK(s.output.outputs[0].finish_reason == finish_reason::length);
  CHECK(s.n_deltas == 40);                            // one per step: the deltas are streamed, not delivered at the end
  CHECK(s.resumed_on == std::this_thread::get_id());  // sync_wait resumes its coroutines on its own thread
  CHECK(expected.outputs[0].text.rfind(", there was a little girl named Lily.", 0) == 0);
  CHECK(expected.prompt == "Once upon a time");
  CHECK(expected.usage.prompt_tokens == static_cast<int32_t>(expected.prompt_token_ids.size()));
  CHECK(expected.usage.completion_tokens == 40);
}

TEST_CASE_FIXTURE(stories_engine, "coroutines compose: a task awaits tasks that await streams") {
  CHECK(sync_wait(two_streams(llm)) == 32);
}

TEST_CASE_FIXTURE(stories_engine, "a rejected request surfaces as an exception from co_await") {
  sync_wait(expect_rejection(llm));
}

TEST_CASE_FIXTURE(stories_engine, "plain callbacks receive every delta, then the output, on the delivery thread") {
  std::mutex m;
  std::condition_variable cv;
  std::string text;
  std::vector<int32_t> ids;
  std::optional<request_output> out;
  std::thread::id delivery;
  stream_callbacks cb;
  cb.on_delta = [&](const stream_delta& d) {
    std::lock_guard lock{m};
    text += d.text;
    ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
    delivery = std::this_thread::get_id();
  };
  cb.on_output = [&](request_output o) {
    std::lock_guard lock{m};
    out = std::move(o);
    cv.notify_all();
  };
  cb.on_error = [&](const error&) { FAIL("unexpected error"); };
  const uint64_t id = llm.submit("Once upon a time", greedy(16), cb);
  std::unique_lock lock{m};
  cv.wait(lock, [&] { return out.has_value(); });
  CHECK(out->request_id == id);
  CHECK(out->outputs[0].token_ids == ids);
  CHECK(out->outputs[0].text == text);
  CHECK(delivery != std::this_thread::get_id());
}

TEST_CASE_FIXTURE(stories_engine,
                  "n > 1 shares the prompt and gives each sequence its own seeded draws, reproducibly") {
  sampling_params p;
  p.n = 4;
  p.temperature = 1.0f;
  p.seed = 1234;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.logprobs = 3;
  const auto a = llm.generate("Once upon a time", p);
  const auto b = llm.generate("Once upon a time", p);
  REQUIRE(a.outputs.size() == 4);
  CHECK(a.outputs == b.outputs);
  CHECK(a.request_id != b.request_id);
  std::set<std::vector<int32_t>> distinct;
  for (uint32_t i = 0; i < 4; ++i) {
    const auto& o = a.outputs[i];
    CHECK(o.index == i);
    CHECK(o.token_ids.size() == 24);
    distinct.insert(o.token_ids);
    REQUIRE(o.logprobs.size() == 24);
    double sum = 0;
    for (size_t t = 0; t < 24; ++t) {
      CHECK(o.logprobs[t].token == o.token_ids[t]);
      CHECK(o.logprobs[t].logprob <= 0.0f);
      REQUIRE(o.logprobs[t].top.size() == 3);
      CHECK(o.logprobs[t].top[0].logprob >= o.logprobs[t].top[1].logprob);
      sum += o.logprobs[t].logprob;
    }
    CHECK(o.cumulative_logprob == doctest::Approx(sum));
  }
  CHECK(distinct.size() > 1);
  CHECK(a.usage.completion_tokens == 4 * 24);
  // Sequence 0 of a seeded n = 4 request draws what an n = 1 request with that seed draws.
  sampling_params one = p;
  one.n = 1;
  CHECK(llm.generate("Once upon a time", one).outputs[0].token_ids == a.outputs[0].token_ids);
  auto stats = llm.stats();
  CHECK(stats.n_free_blocks == stats.n_blocks);
}

TEST_CASE_FIXTURE(stories_engine,
                  "stop strings cut the text and finish the sequence, stop token ids are kept and reported") {
  const auto full = llm.generate("Once upon a time", greedy(40));
  const std::string& text = full.outputs[0].text;  // ", there was a little girl named Lily. She loved to play..."
  sampling_params p = greedy(40);
  p.stop = {"Lily"};
  const auto cut = llm.generate("Once upon a time", p);
  CHECK(cut.outputs[0].finish_reason == finish_reason::stop);
  CHECK(cut.outputs[0].stop_string == "Lily");
  CHECK(cut.outputs[0].text == text.substr(0, text.find("Lily")));
  CHECK(cut.outputs[0].token_ids.size() < 40);
  p.include_stop_str_in_output = true;
  const auto kept = llm.generate("Once upon a time", p);
  CHECK(kept.outputs[0].text == text.substr(0, text.find("Lily") + 4));

  sampling_params q = greedy(40);
  q.stop_token_ids = {426};  // "."
  const auto dot = llm.generate("Once upon a time", q);
  CHECK(dot.outputs[0].finish_reason == finish_reason::stop);
  CHECK(dot.outputs[0].stop_token_id == 426);
  CHECK(dot.outputs[0].token_ids.back() == 426);
  CHECK(dot.outputs[0].text == text.substr(0, text.find('.') + 1));

  // eos: the model ends a story with BOS (id 1), which generation_config.json lists as eos.
  CHECK(llm.info().eos_token_ids == std::vector<int32_t>{2, 1});
  auto stats = llm.stats();
  CHECK(stats.n_free_blocks == stats.n_blocks);
  CHECK(stats.n_running == 0);
}

TEST_CASE_FIXTURE(stories_engine, "bad requests are exceptions naming the problem, and the engine keeps serving") {
  sampling_params long_output = greedy(600);
  CHECK_THROWS_WITH_AS(llm.generate(prompt{std::vector<int32_t>{1}}, long_output),
                       doctest::Contains("over the maximum model length of 512"), error);
  CHECK_THROWS_WITH_AS(llm.generate(prompt{std::vector<int32_t>{1, 9999}}, greedy(4)),
                       doctest::Contains("prompt token id 9999 is outside the vocabulary of 512"), error);
  CHECK_THROWS_WITH_AS(llm.generate(prompt{std::vector<int32_t>{}}, greedy(4)), doctest::Contains("empty"), error);
  sampling_params bad_n = greedy(4);
  bad_n.n = 300;
  CHECK_THROWS_WITH_AS(llm.generate("Hi", bad_n), doctest::Contains("exceeds max_num_seqs 256"), error);
  try {
    sampling_params bad = greedy(4);
    bad.temperature = -1;
    llm.generate("Hi", bad);
    FAIL("accepted a negative temperature");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
  }
  CHECK(llm.generate("Hi", greedy(4)).outputs[0].token_ids.size() == 4);
  auto stats = llm.stats();
  CHECK(stats.n_requests == 0);
  CHECK(stats.n_free_blocks == stats.n_blocks);
}

TEST_CASE_FIXTURE(stories_engine, "destroying an unfinished stream aborts its request") {
  sampling_params p = greedy(500);
  p.ignore_eos = true;
  uint64_t id = 0;
  {
    auto stream = llm.stream(prompt{std::vector<int32_t>{1}}, p);
    id = stream.request_id();
    REQUIRE(stream.wait_next().has_value());
  }
  // The abort was sent when the stream went; a synchronous abort after it finds the request gone.
  CHECK(!llm.abort(id));
  auto stats = llm.stats();
  CHECK(stats.n_free_blocks == stats.n_blocks);
}
