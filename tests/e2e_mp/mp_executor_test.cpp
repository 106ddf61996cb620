// The mp executor end to end through actorllm::LLM: shards in `actorllm worker` processes (TP ranks sharing memory,
// or over Gloo when told to; stages over Gloo) give stories260K's golden greedy ids for TP, PP and TP x PP layouts, and
// a worker killed with SIGKILL ends every in-flight request with an error at once, after which the engine restarts its
// workers and serves the golden output again.
#include "actorllm/llm.hpp"
#include "actorllm/proto/shared_plan.hpp"
#include "e2e_server/server_harness.hpp"
#include "support/golden_ids.hpp"
#include "support/story_prompts.hpp"
#include "support/stream_recorder.hpp"
#include "support/structured_story.hpp"
#include "support/test_paths.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include <dirent.h>
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
#include <sstream>
#include <thread>
#include <tuple>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

using test::golden_case;

/// Worker processes whose parent is this process.
std::vector<pid_t> worker_pids() { return test::worker_pids_of(::getpid()); }

using test::greedy_from_bos;

engine_config mp_config(int tp, int pp) {
  // Worker processes run the actorllm binary; this test program is not it.
  ::setenv("ACTORLLM_WORKER_BIN", test::actorllm_binary().c_str(), 1);
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  c.distributed_executor_backend = "mp";
  return c;
}

/// The parent of `pid` (0 when gone).
pid_t parent_of(pid_t pid) {
  std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream rest{line.substr(close + 2)};
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return state == 'Z' ? 0 : ppid;
}

/// Every live `actorllm worker` process of this machine.
std::vector<pid_t> all_worker_pids() {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  REQUIRE(proc != nullptr);
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || parent_of(pid) == 0)
      continue;
    std::ifstream cmd{"/proc/" + std::to_string(pid) + "/cmdline"};
    std::string args{std::istreambuf_iterator<char>{cmd}, {}};
    if (args.find("worker") != std::string::npos && args.find("--registry") != std::string::npos)
      out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

}  // namespace

TEST_CASE("mp executor: tp 2, tp 4, pp 2 and tp 2 x pp 2 in worker processes give the golden ids") {
  const golden_case g = greedy_from_bos();
  for (auto [tp, pp] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    CAPTURE(tp);
    CAPTURE(pp);
    LLM llm{mp_config(tp, pp)};
    CHECK(llm.info().executor == "mp");
    CHECK(worker_pids().size() == static_cast<size_t>(tp * pp));
    CHECK(test::greedy_ids(llm, g) == g.output);
    // A prompt of 3 full blocks, twice: both runs read them from the prefix cache, in every worker (the golden
    // run above cached its output's blocks too, and the cut prompt is that run's first 51 tokens).
    const golden_case cut = test::greedy_from_bos_after(50);
    CHECK(test::greedy_ids(llm, cut) == cut.output);
    CHECK(test::greedy_ids(llm, cut) == cut.output);
    CHECK(llm.stats().prefix_cache_hits == 2 * 48);
  }
  {
    engine_config off = mp_config(2, 2);
    off.enable_prefix_caching = false;
    LLM llm{off};
    const golden_case cut = test::greedy_from_bos_after(50);
    CHECK(test::greedy_ids(llm, cut) == cut.output);
    CHECK(test::greedy_ids(llm, cut) == cut.output);
    CHECK(llm.stats().prefix_cache_queries == 0);
  }
  // Destroying the LLM stopped its workers.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!worker_pids().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  CHECK(worker_pids().empty());
}

TEST_CASE("mp executor: tp 2 x pp 2 serializes each step's plan once for its 4 worker processes") {
  const golden_case g = greedy_from_bos();
  LLM llm{mp_config(2, 2)};
  REQUIRE(worker_pids().size() == 4);
  const uint64_t steps_before = llm.stats().n_steps;
  const uint64_t before = proto::plan_serializations().load();
  CHECK(test::greedy_ids(llm, g) == g.output);
  const uint64_t steps = llm.stats().n_steps - steps_before;
  CHECK(steps >= g.output.size());
  // One per step (the engine's scheduler writes it for every shard at once), where a plan relayed stage by stage
  // would be written tp * (2 pp - 1) = 6 times.
  CHECK(proto::plan_serializations().load() - before == steps);
}

TEST_CASE("mp executor: with ACTORLLM_SHM_COLLECTIVE=0 the TP ranks all-reduce over Gloo and give the golden ids") {
  ::setenv("ACTORLLM_SHM_COLLECTIVE", "0", 1);  // the workers inherit it
  const golden_case g = greedy_from_bos();
  {
    LLM llm{mp_config(2, 2)};
    CHECK(test::greedy_ids(llm, g) == g.output);
  }
  ::unsetenv("ACTORLLM_SHM_COLLECTIVE");
}

TEST_CASE("mp executor: a dummy Mixtral with expert parallelism (shared memory and Gloo) decodes as in one process") {
  const auto dir = test::make_temp_dir("actorllm-mp-moe");
  {
    std::ofstream f{dir / "config.json"};
    f << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 256, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null,
        "torch_dtype": "float32"})";
  }
  auto config = [&](int tp, int pp, bool ep, const std::string& executor) {
    engine_config c = mp_config(tp, pp);
    c.model = dir.string();
    c.load_format = "dummy";
    c.seed = 9;
    c.enable_expert_parallel = ep;
    c.distributed_executor_backend = executor;
    return c;
  };
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 16;
  const prompt in{std::vector<int32_t>{7, 21, 4, 60, 33}};
  const auto expected = LLM{config(1, 1, false, "uni")}.generate(in, p).outputs.at(0).token_ids;
  for (const char* shm : {"1", "0"}) {
    ::setenv("ACTORLLM_SHM_COLLECTIVE", shm, 1);  // "0": the TP/EP group is Gloo over loopback
    for (auto [tp, pp] : {std::pair{2, 1}, std::pair{2, 2}}) {
      INFO("tp " << tp << " pp " << pp << " shared memory " << shm);
      LLM llm{config(tp, pp, true, "mp")};
      CHECK(llm.info().executor == "mp");
      CHECK(worker_pids().size() == static_cast<size_t>(tp * pp));
      CHECK(llm.generate(in, p).outputs.at(0).token_ids == expected);
      CHECK(llm.stats().expert_tokens.size() == 8);
    }
  }
  ::unsetenv("ACTORLLM_SHM_COLLECTIVE");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "mp executor: context parallel (tp 2 x dcp 2, pcp 2, shared memory and Gloo, with pp 2) decodes as in one "
    "process") {
  const auto dir = test::make_temp_dir("actorllm-mp-dcp");
  {
    std::ofstream f{dir / "config.json"};
    f << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 97,
        "max_position_embeddings": 2048, "torch_dtype": "float32"})";
  }
  auto config = [&](int tp, int pp, int dcp, const std::string& executor) {
    engine_config c = mp_config(tp, pp);
    c.model = dir.string();
    c.load_format = "dummy";
    c.seed = 4;
    c.decode_context_parallel_size = dcp;
    c.distributed_executor_backend = executor;
    return c;
  };
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 16;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 700; ++i)
    ids.push_back(3 + (i * 37 + i / 5) % 90);
  const prompt in{ids};
  LLM uni{config(1, 1, 1, "uni")};
  const auto expected = uni.generate(in, p).outputs.at(0).token_ids;
  for (const char* shm : {"1", "0"}) {
    ::setenv("ACTORLLM_SHM_COLLECTIVE", shm, 1);  // "0": the TP group is Gloo over loopback
    // Prefill context parallel: 2 copies of the TP group in 2 or 4 workers, alone and with dcp 2 and pp 2.
    for (auto [tp, pp, dcp] : {std::tuple{1, 1, 1}, std::tuple{2, 1, 2}, std::tuple{1, 2, 1}}) {
      INFO("tp " << tp << " pp " << pp << " dcp " << dcp << " pcp 2, shared memory " << shm);
      engine_config c = config(tp, pp, dcp, "mp");
      c.prefill_context_parallel_size = 2;
      LLM llm{c};
      CHECK(llm.info().executor == "mp");
      CHECK(llm.info().block_size == 32 * dcp);
      CHECK(worker_pids().size() == static_cast<size_t>(2 * tp * pp));
      CHECK(llm.generate(in, p).outputs.at(0).token_ids == expected);
    }
    for (auto [tp, pp] : {std::pair{2, 1}, std::pair{2, 2}}) {
      INFO("tp " << tp << " pp " << pp << " dcp 2, shared memory " << shm);
      LLM llm{config(tp, pp, 2, "mp")};
      CHECK(llm.info().executor == "mp");
      CHECK(llm.info().block_size == 32);
      // The workers keep 16 of a block's 32 positions: as many blocks as one process's 16-slot ones (twice with
      // half the layers per worker), each covering twice the positions.
      CHECK(llm.info().n_blocks == uni.info().n_blocks * pp);
      CHECK(worker_pids().size() == static_cast<size_t>(tp * pp));
      CHECK(llm.generate(in, p).outputs.at(0).token_ids == expected);
    }
  }
  ::unsetenv("ACTORLLM_SHM_COLLECTIVE");
  std::filesystem::remove_all(dir);
}

TEST_CASE("mp executor: kill -9 of a worker ends every running request within 5 s, then serving resumes") {
  const golden_case g = greedy_from_bos();
  engine_config config = mp_config(2, 2);
  config.max_num_seqs = 8;  // the 32 requests take long enough that the kill finds them running or waiting
  LLM llm{config};
  REQUIRE(test::greedy_ids(llm, g) == g.output);

  // 32 streaming requests that would run for a long time.
  std::atomic<int> ended{0};
  std::atomic<int> errors{0};
  std::atomic<int> started{0};
  sampling_params p;
  p.temperature = 0.8f;
  p.max_tokens = 400;
  p.ignore_eos = true;
  for (int i = 0; i < 32; ++i) {
    stream_callbacks cb;
    cb.on_delta = [&started](const stream_delta& d) {
      if (d.token_ids.size() == 1)
        ++started;
    };
    cb.on_output = [&ended](const request_output&) { ++ended; };
    cb.on_error = [&ended, &errors](const error&) {
      ++errors;
      ++ended;
    };
    llm.submit(prompt{g.prompt}, p, std::move(cb));
  }
  const auto wait_until = [](auto done, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return done();
  };
  REQUIRE(wait_until([&] { return started.load() >= 8; }, 10s));  // 8 run, 24 wait (max_num_seqs 8)
  const auto workers = worker_pids();
  REQUIRE(workers.size() == 4);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(workers[3], SIGKILL);
  CHECK(wait_until([&] { return ended.load() == 32; }, 5s));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  MESSAGE("all 32 requests ended " << seconds << " s after the kill; " << errors.load() << " with an error");
  CHECK(errors.load() == 32);

  // Serving resumes (new workers) and gives the golden output again.
  CHECK(wait_until([&] { return llm.stats().healthy; }, 15s));
  CHECK(test::greedy_ids(llm, g) == g.output);
  const auto fresh = worker_pids();
  CHECK(fresh.size() == 4);
  for (pid_t pid : fresh)
    CHECK(std::find(workers.begin(), workers.end(), pid) == workers.end());
}

TEST_CASE("a request refused for want of a serving replica hears so on the delivery thread, not inside submit") {
  // A caller may hold its own lock around submit that its callbacks take (the HTTP front end does): a refusal
  // answered inside submit would deadlock it.
  engine_config config = mp_config(1, 1);
  config.max_worker_restarts = 0;  // the killed worker stays dead: no replica serves
  LLM llm{config};
  const auto workers = worker_pids();
  REQUIRE(workers.size() == 1);
  ::kill(workers.front(), SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const auto given_up = [&] { return llm.stats().failure.find("cannot serve any more") != std::string::npos; };
  while (!given_up() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  REQUIRE(given_up());
  std::mutex callers_lock;
  std::atomic<bool> answered{false};
  std::atomic<bool> inside_submit{false};
  std::string message;
  stream_callbacks cb;
  const std::thread::id caller = std::this_thread::get_id();
  cb.on_error = [&](const error& e) {
    if (std::this_thread::get_id() == caller) {  // inside submit, under the caller's lock: taking it would deadlock
      inside_submit = true;
    } else {
      std::lock_guard lock{callers_lock};
      message = e.what();
    }
    answered = true;
  };
  {
    std::lock_guard lock{callers_lock};
    llm.submit(prompt{std::vector<int32_t>{1, 2, 3}}, sampling_params{}, std::move(cb));
  }
  const auto by = std::chrono::steady_clock::now() + 5s;
  while (!answered && std::chrono::steady_clock::now() < by)
    std::this_thread::sleep_for(1ms);
  REQUIRE(answered.load());
  CHECK_FALSE(inside_submit.load());
  CHECK_MESSAGE(message.find("cannot serve any more") != std::string::npos, message);
}

TEST_CASE("mp executor: serve exits non-zero when a dead worker may not be restarted (--max-worker-restarts 0)") {
  e2e::server srv{{"-tp", "2", "--distributed-executor-backend", "mp", "--max-worker-restarts", "0"},
                  {"ACTORLLM_WORKER_BIN=" + test::actorllm_binary().string()}};
  std::vector<pid_t> workers;
  for (pid_t pid : all_worker_pids())
    if (parent_of(pid) == srv.pid())
      workers.push_back(pid);
  REQUIRE(workers.size() == 2);
  ::kill(workers.front(), SIGKILL);
  CHECK(srv.wait_exit(15s) == 1);
}

namespace {
std::string testing_join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids)
    s += std::to_string(id) + " ";
  return s;
}
}  // namespace

TEST_CASE("mp executor: logits processors travel to the sampling worker and sample as in one process (tp 2 x pp 2)") {
  sampling_params p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.max_tokens = 12;
  p.allowed_token_ids = {300, 301, 302, 303, 2};
  p.logit_bias = {{301, 3.0f}};
  p.min_tokens = 4;
  p.bad_words = {};
  const std::vector<int32_t> prompt_ids{1, 403, 411};
  engine_config one = mp_config(1, 1);
  one.distributed_executor_backend = "uni";
  std::vector<int32_t> uni_ids;
  {
    LLM llm{one};
    uni_ids = llm.generate(prompt{prompt_ids}, p).outputs.front().token_ids;
  }
  LLM llm{mp_config(2, 2)};
  CHECK(llm.info().executor == "mp");
  CHECK(worker_pids().size() == 4);
  const auto mp_ids = llm.generate(prompt{prompt_ids}, p).outputs.front().token_ids;
  MESSAGE("sampled ids: " << testing_join(mp_ids));
  CHECK(mp_ids == uni_ids);
  REQUIRE(mp_ids.size() >= 4);
  for (std::size_t i = 0; i < mp_ids.size(); ++i) {
    CAPTURE(i);
    CHECK(std::find(p.allowed_token_ids.begin(), p.allowed_token_ids.end(), mp_ids[i]) != p.allowed_token_ids.end());
    if (i < 4)
      CHECK(mp_ids[i] != 2);  // eos masked until min_tokens
  }
}

TEST_CASE("mp executor: prompt logprobs come back from the sampling worker as in one process (tp 2 x pp 2)") {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = 3;
  p.prompt_logprobs = 2;
  const std::vector<int32_t> prompt_ids{1, 403, 407, 261, 265, 300, 411, 290};
  engine_config one = mp_config(1, 1);
  one.distributed_executor_backend = "uni";
  std::vector<prompt_logprob> uni;
  {
    LLM llm{one};
    uni = llm.generate(prompt{prompt_ids}, p).prompt_logprobs;
  }
  REQUIRE(uni.size() == prompt_ids.size() - 1);
  LLM llm{mp_config(2, 2)};
  CHECK(llm.info().executor == "mp");
  const auto mp = llm.generate(prompt{prompt_ids}, p).prompt_logprobs;
  REQUIRE(mp.size() == uni.size());
  for (std::size_t i = 0; i < mp.size(); ++i) {
    CAPTURE(i);
    CHECK(mp[i].token == prompt_ids[i + 1]);
    CHECK(mp[i].rank == uni[i].rank);
    CHECK(std::abs(mp[i].logprob - uni[i].logprob) < 1e-4);  // tp 2 sums in another order
    REQUIRE(mp[i].top.size() == 2);
    CHECK(mp[i].top[0].token == uni[i].top[0].token);
  }
}

TEST_CASE("mp executor: structured outputs constrain the sampling worker as they do in one process (tp 2 x pp 2)") {
  const sampling_params p = test::structured_story_params();
  const std::vector<int32_t> prompt_ids = test::structured_story_prompt();
  engine_config one = mp_config(1, 1);
  one.distributed_executor_backend = "uni";
  std::string uni_text;
  {
    LLM llm{one};
    uni_text = llm.generate(prompt{prompt_ids}, p).outputs.front().text;
  }
  LLM llm{mp_config(2, 2)};
  CHECK(llm.info().executor == "mp");
  const auto out = llm.generate(prompt{prompt_ids}, p).outputs.front();
  CHECK(out.text == uni_text);
  CHECK(out.finish_reason == finish_reason::stop);
  const bool starts_ok = out.text.starts_with("Tom ") || out.text.starts_with("Lily ");
  CHECK_MESSAGE(starts_ok, out.text);
  CHECK_MESSAGE(out.text.ends_with("."), out.text);
}

TEST_CASE("mp executor, dp 2: kill -9 of one replica's worker under 32 greedy streams: each ends as undisturbed") {
  engine_config config = mp_config(1, 1);
  config.data_parallel_size = 2;
  config.max_num_seqs = 8;  // so that the kill finds requests running and waiting on both replicas
  LLM llm{config};
  CHECK(llm.info().data_parallel_size == 2);
  const auto prompts = test::story_prompts();
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = 160;
  p.ignore_eos = true;

  // Undisturbed: the reference every stream must reproduce, token for token and character for character.
  std::vector<prompt> batch(prompts.begin(), prompts.end());
  const auto reference = llm.generate(batch, p);
  REQUIRE(reference.size() == 32);
  const auto before = llm.stats();
  REQUIRE(before.replicas.size() == 2);
  CHECK(before.replicas[0].routed_requests > 0);
  CHECK(before.replicas[1].routed_requests > 0);

  test::stream_recorder streams;
  for (const auto& text : prompts)
    llm.submit(prompt{text}, p, streams.add());
  const auto wait_until = [](auto done, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return done();
  };
  REQUIRE(wait_until([&] { return streams.tokens() >= 200; }, 20s));  // well under way on both replicas
  REQUIRE(streams.ended() == 0);
  auto workers = worker_pids();
  REQUIRE(workers.size() == 2);
  std::sort(workers.begin(), workers.end());
  ::kill(workers.back(), SIGKILL);  // replica 1's (built second)

  bool healthy_throughout = true;
  const bool all_ended = wait_until(
      [&] {
        healthy_throughout = healthy_throughout && llm.stats().healthy;
        return streams.ended() == 32;
      },
      60s);
  REQUIRE(all_ended);
  CHECK(healthy_throughout);
  const auto after = llm.stats();
  MESSAGE(after.n_failovers << " request(s) moved to the other replica");
  CHECK(after.n_failovers > 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    test::recorded_stream& r = streams.stream(i);
    std::lock_guard lock{r.mutex};
    REQUIRE_MESSAGE(!r.error, *r.error);
    REQUIRE(r.output);
    const completion_output& want = reference[i].outputs.at(0);
    CHECK(r.ids == want.token_ids);
    CHECK(r.text == want.text);
    CHECK(r.output->outputs.at(0).token_ids == want.token_ids);
    CHECK(r.output->outputs.at(0).text == want.text);
    CHECK(r.output->outputs.at(0).finish_reason == finish_reason::length);
  }

  // The dead replica comes back and takes traffic again.
  REQUIRE(wait_until([&] { return llm.stats().replicas.at(1).healthy; }, 30s));
  const uint64_t routed_before = llm.stats().replicas.at(1).routed_requests;
  const auto again = llm.generate(batch, p);
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(again[i].outputs.at(0).token_ids == reference[i].outputs.at(0).token_ids);
  CHECK(llm.stats().replicas.at(1).routed_requests > routed_before);
  CHECK(llm.stats().replicas.at(1).restarts == 1);
}

TEST_CASE("mp executor: quantized weights (an AWQ config, and --quantization fp8 at load) decode as in one process") {
  const auto dir = test::make_temp_dir("actorllm-mp-quantized");
  {
    std::ofstream f{dir / "config.json"};
    f << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 256, "torch_dtype": "float32",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true,
                                "version": "gemm"}})";
  }
  const auto float_dir = test::make_temp_dir("actorllm-mp-float");
  {
    std::ofstream f{float_dir / "config.json"};
    f << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 256, "torch_dtype": "float32"})";
  }
  auto config = [&](const std::filesystem::path& model, const std::string& quantization, int tp, int pp,
                    const std::string& executor) {
    engine_config c = mp_config(tp, pp);
    c.model = model.string();
    c.load_format = "dummy";
    c.seed = 5;
    c.quantization = quantization;
    c.distributed_executor_backend = executor;
    return c;
  };
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 16;
  const prompt in{std::vector<int32_t>{7, 21, 4, 60, 33}};
  for (const auto& [model, quantization] : {std::pair{dir, std::string()}, std::pair{float_dir, std::string("fp8")}}) {
    const auto expected = LLM{config(model, quantization, 1, 1, "uni")}.generate(in, p).outputs.at(0).token_ids;
    LLM llm{config(model, quantization, 2, 2, "mp")};
    CHECK(llm.info().executor == "mp");
    INFO("quantization '" << quantization << "'");
    CHECK(llm.generate(in, p).outputs.at(0).token_ids == expected);
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(float_dir);
}

TEST_CASE("mp executor: a LoRA adapter reaches the worker processes and gives the in-process ids, beside base rows") {
  const auto dir = test::make_temp_dir("actorllm-mp-lora");
  const std::string cmd = fmt::format(
      "python3 '{}/scripts/make_lora_adapter.py' --model '{}' --out '{}' --rank 8 --alpha 8 --targets "
      "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --seed 3 > /dev/null",
      ACTORLLM_SOURCE_DIR, test::model_dir("stories260K").string(), (dir / "adapter").string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  auto config = [](int tp, int pp, const std::string& executor) {
    engine_config c = mp_config(tp, pp);
    c.distributed_executor_backend = executor;
    c.enable_lora = true;
    return c;
  };
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 16;
  const lora_request adapter{"adapter", 1, (dir / "adapter").string()};
  const std::vector<prompt> batch{prompt{std::vector<int32_t>{1, 403, 407, 261}},
                                  prompt{std::vector<int32_t>{1, 403, 407, 261}}.with_lora(adapter)};
  auto ids = [&](LLM& llm) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : llm.generate(batch, p))
      out.push_back(r.outputs.at(0).token_ids);
    return out;
  };
  LLM local{config(1, 1, "uni")};
  const auto expected = ids(local);
  CHECK(expected[0] != expected[1]);  // the adapter changes the continuation
  LLM llm{config(2, 2, "mp")};
  CHECK(llm.info().executor == "mp");
  CHECK(ids(llm) == expected);
  std::filesystem::remove_all(dir);
}
