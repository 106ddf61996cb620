// Lockstep DP+EP in worker processes (the mp executor): dp 2 replicas × tp 2 ranks, each rank an `actorllm worker`
// process, one expert-parallel group of 4 over the processes (shared memory, or Gloo over loopback), the step rounds
// between the schedulers over CAF messages. Random-weight Mixtral, Qwen2-MoE and Qwen3-MoE checkpoints give the
// float64 reference's greedy ids with one replica busy and the other idle and with both busy, and with EPLB moving
// experts between the processes; a worker killed with
// SIGKILL under 16 streams restarts the whole set, and every stream resumes there and ends as undisturbed (through
// actorllm::LLM, and through `actorllm serve` with SSE streams that each end with [DONE]).
#include "actorllm/llm.hpp"
#include "e2e_server/data_parallel_checks.hpp"
#include "e2e_server/server_harness.hpp"
#include "model/model_config.hpp"
#include "model_test_util.hpp"
#include "moe_model_json.hpp"
#include "reference_llama.hpp"
#include "support/stream_recorder.hpp"
#include "support/test_paths.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// dp 2 × tp 2 with expert parallelism in mp worker processes, over the checkpoint in `dir`.
engine_config lockstep_mp_config(const std::filesystem::path& dir) {
  ::setenv("ACTORLLM_WORKER_BIN", test::actorllm_binary().c_str(), 1);  // workers run the actorllm binary
  engine_config c;
  c.model = dir.string();
  c.tensor_parallel_size = 2;
  c.data_parallel_size = 2;
  c.enable_expert_parallel = true;
  c.distributed_executor_backend = "mp";
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  c.seed = 5;
  return c;
}

std::vector<int32_t> greedy_ids(LLM& llm, const std::vector<int32_t>& prompt_ids, int32_t n) {
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = n;
  return llm.generate(prompt{prompt_ids}, p).outputs.at(0).token_ids;
}

/// Waits up to `limit` for `done()`; returns its last answer.
template <class F>
bool wait_until(F done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  return done();
}

}  // namespace

TEST_CASE("mp executor, lockstep dp 2 x tp 2: MoE checkpoints give the float64 reference's ids, busy or idle") {
  struct model_case {
    std::string json;
    uint64_t seed;
    bool over_gloo_too;  // the EP group over Gloo as well (it is what spans nodes)
  };
  using model::test_util::mixtral_json;
  using model::test_util::qwen2_moe_json;
  using model::test_util::qwen3_moe_json;
  const std::vector<model_case> cases = {
      {mixtral_json(), 11, true}, {qwen2_moe_json(), 12, false}, {qwen3_moe_json(), 13, false}};
  const std::vector<int32_t> first{3, 14, 15, 92, 65, 35, 89, 79};
  const std::vector<int32_t> second{27, 18, 28, 18, 28, 45};
  constexpr int32_t n = 24;
  for (const auto& m : cases) {
    const model::model_config cfg = model::parse_model_config(m.json, "config.json");
    const model::model_weights w = model::test_util::random_weights(cfg, m.seed, dtype::f32);
    const auto dir = test::make_temp_dir("actorllm-mp-lockstep");
    model::test_util::write_checkpoint(dir, m.json, w);
    const auto want_first = model::test_util::reference_greedy(cfg, w, first, n);
    const auto want_second = model::test_util::reference_greedy(cfg, w, second, n);
    // A model stuck on one token would make the comparisons trivially true.
    CHECK(std::set<int32_t>(want_first.begin(), want_first.end()).size() >= 6);
    for (const char* shm : m.over_gloo_too ? std::vector<const char*>{"1", "0"} : std::vector<const char*>{"1"}) {
      INFO(cfg.architecture << ", shared-memory collectives " << shm);
      ::setenv("ACTORLLM_SHM_COLLECTIVE", shm, 1);
      LLM llm{lockstep_mp_config(dir)};
      CHECK(llm.info().executor == "mp");
      CHECK(test::worker_pids_of(::getpid()).size() == 4);
      // One replica busy, the other idle (serving its experts to the busy one's tokens).
      CHECK(greedy_ids(llm, first, n) == want_first);
      // Both busy, each request on one replica or the other.
      sampling_params p;
      p.temperature = 0;
      p.ignore_eos = true;
      p.max_tokens = n;
      const auto both =
          llm.generate(std::vector<prompt>{prompt{first}, prompt{second}, prompt{second}, prompt{first}}, p);
      CHECK(both.at(0).outputs.at(0).token_ids == want_first);
      CHECK(both.at(1).outputs.at(0).token_ids == want_second);
      CHECK(both.at(2).outputs.at(0).token_ids == want_second);
      CHECK(both.at(3).outputs.at(0).token_ids == want_first);
      const auto stats = llm.stats();
      REQUIRE(stats.replicas.size() == 2);
      CHECK(stats.replicas[0].routed_requests > 0);
      CHECK(stats.replicas[1].routed_requests > 0);
    }
    ::unsetenv("ACTORLLM_SHM_COLLECTIVE");
    if (cfg.architecture == "MixtralForCausalLM") {
      // EPLB across the processes: 12 expert slots (4 redundant), 3 per rank, moved every 5 steps over the EP group.
      engine_config c = lockstep_mp_config(dir);
      c.enable_eplb = true;
      c.eplb = eplb_config{8, 5, 4, true};
      LLM llm{c};
      CHECK(greedy_ids(llm, first, n) == want_first);
      CHECK(greedy_ids(llm, second, n) == want_second);
      const engine_stats s = llm.stats();
      CHECK(s.eplb.rearrangements >= 8);  // 48 steps at least, idle ones included
      CHECK(s.eplb.tokens_per_rank_mean_before > 0);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE(
    "mp executor, lockstep dp 2 x tp 2: kill -9 of one worker under 16 streams restarts the set, every stream "
    "resumes") {
  const auto dir = test::make_temp_dir("actorllm-mp-lockstep-kill");
  const std::string json = model::test_util::mixtral_json();
  const model::model_config cfg = model::parse_model_config(json, "config.json");
  model::test_util::write_checkpoint(dir, json, model::test_util::random_weights(cfg, 21, dtype::f32));
  engine_config config = lockstep_mp_config(dir);
  config.max_num_seqs = 4;  // so that the kill finds requests running and waiting on both replicas
  LLM llm{config};
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 96;
  std::vector<prompt> prompts;
  for (int32_t i = 0; i < 16; ++i)
    prompts.emplace_back(std::vector<int32_t>{1 + i, 40 + 2 * i, 7, 90 - i, 3 * i % 97});

  // Undisturbed: the reference every stream must reproduce, token for token.
  const auto reference = llm.generate(prompts, p);
  REQUIRE(reference.size() == 16);

  test::stream_recorder streams;
  for (const auto& one : prompts)
    llm.submit(one, p, streams.add());
  REQUIRE(wait_until([&] { return streams.tokens() >= 150; }, 60s));  // under way on both replicas
  REQUIRE(streams.ended() == 0);
  auto workers = test::worker_pids_of(::getpid());
  REQUIRE(workers.size() == 4);
  std::sort(workers.begin(), workers.end());
  ::kill(workers.back(), SIGKILL);

  const bool all_ended = wait_until([&] { return streams.ended() == 16; }, 120s);
  REQUIRE(all_ended);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    test::recorded_stream& r = streams.stream(i);
    std::lock_guard lock{r.mutex};
    REQUIRE_MESSAGE(!r.error, *r.error);
    REQUIRE(r.output);
    const completion_output& want = reference[i].outputs.at(0);
    CHECK(r.ids == want.token_ids);  // every delta once: none lost, none repeated by the resumption
    CHECK(r.output->outputs.at(0).token_ids == want.token_ids);
    CHECK(r.output->outputs.at(0).finish_reason == finish_reason::length);
  }
  const auto after = llm.stats();
  REQUIRE(after.replicas.size() == 2);
  CHECK(after.replicas[0].restarts == 1);  // the set restarted as one
  CHECK(after.replicas[1].restarts == 1);
  CHECK(after.n_failovers > 0);
  CHECK(test::worker_pids_of(::getpid()).size() == 4);  // the new set's workers; the old ones are gone
  // The restarted set serves as before.
  CHECK(llm.generate(prompts[3], p).outputs.at(0).token_ids == reference[3].outputs.at(0).token_ids);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "serve: lockstep dp 2 x tp 2 (mp), kill -9 of one worker under 16 SSE streams: each ends with [DONE] as "
    "undisturbed") {
  // A dummy Mixtral with stories260K's vocabulary and tokenizer, so that the story prompts are text.
  const auto dir = test::make_temp_dir("actorllm-serve-lockstep");
  std::ofstream{dir / "config.json"} << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 512, "max_position_embeddings": 512, "num_local_experts": 8, "num_experts_per_tok": 2,
      "bos_token_id": 1, "eos_token_id": 2, "sliding_window": null, "torch_dtype": "float32"})";
  e2e::server srv{{"--load-format", "dummy", "--tokenizer", test::model_dir("stories260K").string(), "-dp", "2", "-tp",
                   "2", "--enable-expert-parallel", "--distributed-executor-backend", "mp", "--max-num-seqs", "4",
                   "--kv-cache-memory", "4MiB", "--max-worker-restarts", "5"},
                  {"ACTORLLM_WORKER_BIN=" + test::actorllm_binary().string()},
                  dir};
  const uint16_t port = srv.port();
  REQUIRE(test::worker_pids_of(srv.pid()).size() == 4);
  auto prompts = test::story_prompts();
  prompts.resize(16);

  // Undisturbed, all at once.
  std::vector<std::string> reference(prompts.size());
  {
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
      clients.emplace_back([&, i] {
        reference[i] =
            e2e::completion_text(e2e::http(port, "POST", "/v1/completions", e2e::story_body(prompts[i], false)));
      });
    for (auto& t : clients)
      t.join();
  }
  for (const auto& text : reference)
    REQUIRE_MESSAGE(text.size() > 100, text);

  std::vector<std::string> streamed(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back(
        [&, i] { streamed[i] = e2e::http(port, "POST", "/v1/completions", e2e::story_body(prompts[i], true)).body; });
  // Once both replicas run requests, one worker of the set goes.
  const std::string running = R"(actorllm:num_requests_running{model_name="stories",replica=")";
  REQUIRE(wait_until(
      [&] { return e2e::metric(port, running + "0\"}") >= 2 && e2e::metric(port, running + "1\"}") >= 2; }, 30s));
  auto workers = test::worker_pids_of(srv.pid());
  REQUIRE(workers.size() == 4);
  ::kill(workers.front(), SIGKILL);
  for (auto& t : clients)
    t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    const e2e::sse_result r = e2e::parse_sse(streamed[i]);
    CHECK_MESSAGE(r.error.empty(), r.error);
    CHECK(r.done);
    CHECK(r.text == reference[i]);
  }
  const std::string log = srv.log();
  CHECK_MESSAGE(log.find("the 2 replicas of the expert-parallel set serve again") != std::string::npos, log);
  CHECK(e2e::metric(port, R"(actorllm:request_failovers_total{model_name="stories"})") > 0);
  CHECK(e2e::metric(port, R"(actorllm:ep_exchange_bytes_total{model_name="stories"})") > 0);  // the EP group's bytes
  std::filesystem::remove_all(dir);
}
