// The calls of actorllm::LLM that never wait on the engine: abort_async, stats_async and reset_prefix_cache_async
// return at once, and their answers come through the request's own callbacks or the call's callback, on actorllm's
// threads.
#include "actorllm/llm.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

engine_config stories_config() {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  return c;
}

/// One callback's answer, waited for with a deadline (a callback that never comes fails the test, not hangs it).
template <class T>
struct answer {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<T> value;
  std::thread::id thread;
  int calls = 0;

  void set(T v) {
    std::lock_guard lock{mutex};
    value = std::move(v);
    thread = std::this_thread::get_id();
    ++calls;
    cv.notify_all();
  }
  T wait() {
    std::unique_lock lock{mutex};
    REQUIRE(cv.wait_for(lock, 30s, [this] { return value.has_value(); }));
    return *value;
  }
};

sampling_params greedy(int32_t max_tokens) {
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace

TEST_CASE("abort_async of an unknown or finished id is ignored, and the engine goes on serving") {
  LLM llm{stories_config()};
  llm.abort_async(987654321);
  const auto done = llm.generate(prompt{std::vector<int32_t>{1}}, greedy(4));
  llm.abort_async(done.request_id);  // finished already
  CHECK(llm.generate(prompt{std::vector<int32_t>{1}}, greedy(8)).outputs[0].token_ids.size() == 8);
  const engine_stats s = llm.stats();
  CHECK(s.healthy);
  CHECK(s.n_requests == 0);
}

TEST_CASE("abort_async of a running request returns at once, and the request ends with abort and frees its blocks") {
  LLM llm{stories_config()};
  const int32_t n_blocks = llm.info().n_blocks;
  auto stream = llm.stream(prompt{std::vector<int32_t>{1}}, greedy(511));  // far longer than the test runs
  REQUIRE(stream.wait_next().has_value());
  llm.abort_async(stream.request_id());
  while (stream.wait_next()) {
  }
  const request_output& out = stream.output();
  REQUIRE(out.outputs.size() == 1);
  CHECK(out.outputs[0].finish_reason == finish_reason::abort);
  CHECK(out.outputs[0].token_ids.size() < 511);
  // The engine freed the blocks before it answered anything sent after the abort.
  const engine_stats after = llm.stats();
  CHECK(after.n_free_blocks == n_blocks);
  CHECK(after.n_requests == 0);
  CHECK_FALSE(llm.abort(stream.request_id()));  // not live any more
}

TEST_CASE("stats_async delivers the snapshot stats() gives, once, on a thread of actorllm's") {
  LLM llm{stories_config()};
  auto stream = llm.stream(prompt{std::vector<int32_t>{1}}, greedy(511));
  REQUIRE(stream.wait_next().has_value());

  answer<engine_stats> running;
  llm.stats_async([&running](engine_stats s) { running.set(std::move(s)); });
  const engine_stats s = running.wait();
  CHECK(running.thread != std::this_thread::get_id());
  CHECK(s.healthy);
  CHECK(s.n_running == 1);
  CHECK(s.n_requests == 1);
  CHECK(s.n_blocks == llm.info().n_blocks);
  CHECK(s.n_free_blocks < s.n_blocks);
  REQUIRE(s.replicas.size() == 1);
  CHECK(s.replicas[0].healthy);
  CHECK(s.replicas[0].n_running == 1);

  stream.abort();
  while (stream.wait_next()) {
  }
  // The abort ends the stream at once; a step planned before it may still be in flight and lands after (it adds to
  // n_steps and forward_seconds). Wait for the engine to go quiet, with a deadline, before comparing snapshots.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (engine_stats now = llm.stats(); now.n_steps_in_flight != 0 || now.n_requests != 0; now = llm.stats()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(1ms);
  }
  answer<engine_stats> idle;
  llm.stats_async([&idle](engine_stats snapshot) { idle.set(std::move(snapshot)); });
  CHECK(idle.wait() == llm.stats());  // nothing ran in between: the same snapshot
  std::this_thread::sleep_for(50ms);  // a second call would come now; there is none
  std::lock_guard lock{idle.mutex};
  CHECK(idle.calls == 1);
}

TEST_CASE("a stats_async asked for just before the LLM is destroyed is delivered before the destructor returns") {
  answer<engine_stats> last;
  {
    LLM llm{stories_config()};
    llm.stats_async([&last](engine_stats s) { last.set(std::move(s)); });
  }
  std::lock_guard lock{last.mutex};
  CHECK(last.calls == 1);
}

TEST_CASE("reset_prefix_cache_async reports the blocks forgotten, as reset_prefix_cache does") {
  LLM llm{stories_config()};
  std::vector<int32_t> long_prompt{1};
  for (int32_t t = 0; t < 40; ++t)
    long_prompt.push_back(300 + t);  // two full blocks of 16 to cache
  llm.generate(prompt{long_prompt}, greedy(4));

  answer<std::pair<int32_t, std::optional<error>>> first;
  llm.reset_prefix_cache_async([&first](int32_t forgotten, std::optional<error> failure) {
    first.set({forgotten, std::move(failure)});
  });
  const auto [forgotten, failure] = first.wait();
  CHECK_FALSE(failure.has_value());
  CHECK(forgotten >= 2);
  CHECK(first.thread != std::this_thread::get_id());
  CHECK(llm.reset_prefix_cache() == 0);  // nothing left to forget

  answer<std::pair<int32_t, std::optional<error>>> again;
  llm.reset_prefix_cache_async([&again](int32_t n, std::optional<error> why) { again.set({n, std::move(why)}); });
  CHECK(again.wait().first == 0);
}
