// Acceptance 2 and 3 of the actor engine, through actorllm::LLM: many requests through a KV cache too small for
// them preempt each other and still produce what each would alone, leaving every block free; an abort frees a
// running request's blocks before it returns.
#include "actorllm/llm.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <random>

using namespace actorllm;

namespace {

constexpr size_t stories_bytes_per_block = 2 * 5 * 16 * 4 * 8 * sizeof(float);  // k+v, layers, slots, kv heads, dim

engine_config stories_config() {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  return c;
}

struct mixed_request {
  std::vector<int32_t> prompt;
  sampling_params params;
};

// Prompt lengths 1..48, output lengths 1..60, mostly greedy, a quarter sampled with their own seeds; some ignore eos,
// some stop at stop tokens.
std::vector<mixed_request> mixed_requests(size_t n) {
  std::mt19937 rng{20240611};
  std::uniform_int_distribution<int> prompt_len{1, 48}, out_len{1, 60}, token{3, 511}, kind{0, 7};
  std::vector<mixed_request> out;
  for (size_t i = 0; i < n; ++i) {
    mixed_request r;
    r.prompt.push_back(1);
    const int len = prompt_len(rng);
    for (int t = 1; t < len; ++t)
      r.prompt.push_back(token(rng));
    r.params.max_tokens = out_len(rng);
    const int k = kind(rng);
    r.params.temperature = k < 2 ? 0.8f : 0.0f;
    if (k < 2) {
      r.params.seed = 1000 + i;
      r.params.top_k = k == 0 ? 40 : 0;
      r.params.presence_penalty = k == 1 ? 0.5f : 0.0f;
    }
    r.params.ignore_eos = k % 2 == 0;
    if (k == 3 || k == 5)
      r.params.stop_token_ids = {432, 426};  // "," and "." in stories260K: these stop early
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

TEST_CASE("256 mixed requests through a small KV cache: preemptions, outputs as alone, every block free after") {
  const auto requests = mixed_requests(256);

  // Each request alone, on an engine with room to spare.
  std::vector<request_output> alone;
  {
    LLM llm{stories_config()};
    for (const auto& r : requests)
      alone.push_back(llm.generate(prompt{r.prompt}, r.params));
  }

  // All of them at once through 24 blocks (384 token slots) and at most 32 running sequences: the cache holds a few
  // requests at a time, so the scheduler must preempt (and recompute) to make progress.
  engine_config small = stories_config();
  small.kv_cache_memory = 24 * stories_bytes_per_block;
  small.max_model_len = 128;
  small.max_num_seqs = 32;
  small.max_num_batched_tokens = 256;
  LLM llm{small};
  REQUIRE(llm.info().n_blocks == 24);

  std::vector<std::unique_ptr<generation_stream>> streams;
  for (const auto& r : requests)
    streams.push_back(std::make_unique<generation_stream>(llm.stream(prompt{r.prompt}, r.params)));
  size_t n_stop = 0, n_sampled = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> streamed;
    while (auto delta = streams[i]->wait_next())
      streamed.insert(streamed.end(), delta->token_ids.begin(), delta->token_ids.end());
    const request_output& out = streams[i]->output();
    INFO("request " << i << ": prompt " << requests[i].prompt.size() << " tokens, max_tokens "
                    << *requests[i].params.max_tokens << ", temperature " << requests[i].params.temperature);
    REQUIRE(out.outputs.size() == 1);
    CHECK(out.outputs[0].token_ids == alone[i].outputs[0].token_ids);
    CHECK(out.outputs[0].text == alone[i].outputs[0].text);
    CHECK(out.outputs[0].finish_reason == alone[i].outputs[0].finish_reason);
    CHECK(streamed == out.outputs[0].token_ids);
    CHECK(out.usage == alone[i].usage);
    n_stop += out.outputs[0].finish_reason == finish_reason::stop ? 1 : 0;
    n_sampled += requests[i].params.temperature > 0 ? 1 : 0;
  }
  MESSAGE("requests that stopped early: " << n_stop << ", sampled (seeded): " << n_sampled);
  CHECK(n_stop > 0);
  CHECK(n_sampled > 0);

  const engine_stats stats = llm.stats();
  MESSAGE("preemptions: " << stats.n_preemptions << ", steps: " << stats.n_steps);
  CHECK(stats.n_preemptions > 0);
  CHECK(stats.n_free_blocks == stats.n_blocks);
  CHECK(stats.n_blocks == 24);
  CHECK(stats.kv_cache_usage == 0.0);
  CHECK(stats.n_running == 0);
  CHECK(stats.n_waiting == 0);
  CHECK(stats.n_requests == 0);
  CHECK(stats.n_steps_in_flight == 0);
  CHECK(stats.healthy);
}

TEST_CASE("the same mix through a 2x2 (tp x pp) engine with a small cache gives the same outputs") {
  const auto requests = mixed_requests(48);
  std::vector<prompt> prompts;
  std::vector<request_output> alone;
  {
    LLM llm{stories_config()};
    for (const auto& r : requests)
      alone.push_back(llm.generate(prompt{r.prompt}, r.params));
  }
  engine_config cfg = stories_config();
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  // tp 2 halves the kv heads per shard, pp 2 gives stage 0 three of the five layers: 3/5 * 1/2 of a full block.
  cfg.kv_cache_memory = 16 * (stories_bytes_per_block * 3 / 10);
  cfg.max_model_len = 128;
  cfg.max_num_seqs = 16;
  LLM llm{cfg};
  REQUIRE(llm.info().n_blocks == 16);
  std::vector<generation_stream> streams;
  for (const auto& r : requests)
    streams.push_back(llm.stream(prompt{r.prompt}, r.params));
  for (size_t i = 0; i < streams.size(); ++i) {
    while (streams[i].wait_next()) {
    }
    INFO("request " << i);
    CHECK(streams[i].output().outputs.at(0).token_ids == alone[i].outputs.at(0).token_ids);
  }
  auto stats = llm.stats();
  CHECK(stats.n_preemptions > 0);
  CHECK(stats.n_free_blocks == stats.n_blocks);
}

TEST_CASE("aborting a running request frees its blocks at once") {
  LLM llm{stories_config()};
  const int32_t n_blocks = llm.info().n_blocks;
  sampling_params long_run;
  long_run.temperature = 0;
  long_run.ignore_eos = true;
  long_run.max_tokens = 511;  // the whole context: far longer than the test needs to abort it
  auto stream = llm.stream(prompt{std::vector<int32_t>{1}}, long_run);
  auto first = stream.wait_next();
  REQUIRE(first.has_value());
  CHECK(first->token_ids.size() == 1);

  const engine_stats running = llm.stats();
  CHECK(running.n_running == 1);
  CHECK(running.n_requests == 1);
  CHECK(running.n_free_blocks < n_blocks);

  CHECK(llm.abort(stream.request_id()));
  // No waiting: the blocks are free when abort() returns.
  const engine_stats after = llm.stats();
  CHECK(after.n_free_blocks == n_blocks);
  CHECK(after.n_running == 0);
  CHECK(after.n_requests == 0);

  while (stream.wait_next()) {
  }
  const request_output& out = stream.output();
  REQUIRE(out.outputs.size() == 1);
  CHECK(out.outputs[0].finish_reason == finish_reason::abort);
  CHECK(out.outputs[0].token_ids.size() < 511);
  CHECK(!llm.abort(stream.request_id()));  // not live any more
  CHECK(!llm.abort(987654321));            // never was

  // The engine goes on serving.
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = 8;
  auto again = llm.generate(prompt{std::vector<int32_t>{1}}, p);
  CHECK(again.outputs[0].token_ids.size() == 8);
}

TEST_CASE("aborting one of several requests leaves the others' outputs untouched") {
  LLM llm{stories_config()};
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 100;
  const auto expected = llm.generate(prompt{std::vector<int32_t>{1}}, p).outputs[0].token_ids;
  auto keep_a = llm.stream(prompt{std::vector<int32_t>{1}}, p);
  sampling_params long_run = p;
  long_run.max_tokens = 500;
  auto victim = llm.stream(prompt{std::vector<int32_t>{1}}, long_run);
  auto keep_b = llm.stream(prompt{std::vector<int32_t>{1}}, p);
  REQUIRE(victim.wait_next().has_value());
  CHECK(llm.abort(victim.request_id()));
  while (keep_a.wait_next()) {
  }
  while (keep_b.wait_next()) {
  }
  CHECK(keep_a.output().outputs[0].token_ids == expected);
  CHECK(keep_b.output().outputs[0].token_ids == expected);
  while (victim.wait_next()) {
  }
  CHECK(victim.output().outputs[0].finish_reason == finish_reason::abort);
  auto stats = llm.stats();
  CHECK(stats.n_free_blocks == stats.n_blocks);
}

TEST_CASE("under the priority policy, waiting requests are admitted lower priority value first") {
  engine_config cfg = stories_config();
  cfg.scheduling_policy = "priority";
  cfg.max_num_seqs = 1;  // one runs, the others wait: admission order is completion order
  LLM llm{cfg};
  std::mutex m;
  std::condition_variable cv;
  std::vector<uint64_t> finished;
  auto record = [&] {
    stream_callbacks cb;
    cb.on_output = [&](request_output o) {
      std::lock_guard lock{m};
      finished.push_back(o.request_id);
      cv.notify_all();
    };
    return cb;
  };
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 20;
  auto first = llm.stream(prompt{std::vector<int32_t>{1}}, p, 5);
  REQUIRE(first.wait_next().has_value());  // running: the next two wait behind it
  const uint64_t low = llm.submit(prompt{std::vector<int32_t>{1}}, p, record(), 10);
  const uint64_t high = llm.submit(prompt{std::vector<int32_t>{1}}, p, record(), 0);
  std::unique_lock lock{m};
  cv.wait(lock, [&] { return finished.size() == 2; });
  CHECK(finished == std::vector<uint64_t>{high, low});
  CHECK_THROWS_WITH_AS(llm.generate({prompt{"a"}, prompt{"b"}}, p, {1}),
                       doctest::Contains("1 priorities for 2 prompts"), error);
  engine_config bad = stories_config();
  bad.scheduling_policy = "lifo";
  CHECK_THROWS_WITH_AS(LLM{bad}, doctest::Contains("'lifo' is not one of fcfs, priority"), error);
}
