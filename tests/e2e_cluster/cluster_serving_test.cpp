// The cluster executor on a simulated multi-node cluster (tests/e2e_cluster/cluster_harness.hpp): TP x PP over two
// nodes gives stories260K's golden ids; a layout bigger than the cluster fails at once with every node listed; a
// node without the model is named; killing a worker, or a whole node agent, while requests stream ends them at
// once, /health is not 200 meanwhile, and serving resumes with the golden output; a restart that cannot place the
// layout waits and tries again, so a node that joins meanwhile is used. Structured outputs constrain the sampling
// worker as in one process.
#include "actorllm/llm.hpp"
#include "e2e_cluster/cluster_harness.hpp"
#include "e2e_server/server_harness.hpp"
#include "support/golden_ids.hpp"
#include "support/structured_story.hpp"
#include "support/test_paths.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using test::golden_case;
using test::greedy_from_bos;

engine_config cluster_config(const test::sim_cluster& cluster, int tp, int pp,
                             std::string model = test::model_dir("stories260K").string()) {
  engine_config c;
  c.model = std::move(model);
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.kv_cache_memory = size_t{4} << 20;
  c.distributed_executor_backend = "cluster";
  c.cluster_address = cluster.head_address();
  c.cluster_token = cluster.token();
  return c;
}

template <class Done>
bool wait_until(Done done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(2ms);
  return done();
}

/// The last `n` bytes of `text` (a log's end, for a failure's message).
std::string tail_of(const std::string& text, size_t n) { return text.size() > n ? text.substr(text.size() - n) : text; }

}  // namespace

TEST_CASE("cluster: tp 2 x pp 2 over 2 simulated nodes (4 worker processes) gives the golden ids") {
  test::sim_cluster cluster{2, 2};
  const golden_case g = greedy_from_bos();
  LLM llm{cluster_config(cluster, 2, 2)};
  CHECK(llm.info().executor == "cluster");
  // Each stage's TP group sits inside one node: two workers under each agent.
  CHECK(test::worker_pids_of(cluster.process("node-0").pid).size() == 2);
  CHECK(test::worker_pids_of(cluster.process("node-1").pid).size() == 2);
  CHECK(test::greedy_ids(llm, g) == g.output);
}

TEST_CASE("cluster: structured outputs constrain the sampling worker, whose tokenizer comes with its assignment") {
  const sampling_params p = test::structured_story_params();
  const std::vector<int32_t> prompt_ids = test::structured_story_prompt();
  std::string uni_text;
  {
    engine_config one;
    one.model = test::model_dir("stories260K").string();
    one.kv_cache_memory = size_t{4} << 20;
    one.distributed_executor_backend = "uni";
    LLM uni{one};
    uni_text = uni.generate(prompt{prompt_ids}, p).outputs.front().text;
  }
  test::sim_cluster cluster{2, 2};
  LLM llm{cluster_config(cluster, 2, 2)};
  REQUIRE(llm.info().executor == "cluster");
  const auto out = llm.generate(prompt{prompt_ids}, p).outputs.front();
  CHECK(out.text == uni_text);  // the same seeded draws under the same masks
  CHECK(out.finish_reason == finish_reason::stop);
  const bool starts_ok = out.text.starts_with("Tom ") || out.text.starts_with("Lily ");
  CHECK_MESSAGE(starts_ok, out.text);
  CHECK_MESSAGE(out.text.ends_with("."), out.text);
}

TEST_CASE("cluster: tp 2 x dcp 2, and pcp 2, on 2 simulated nodes (the group over Gloo) decode as in one process") {
  const auto dir = test::make_temp_dir("actorllm-cluster-dcp");
  std::ofstream{dir / "config.json"} << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "vocab_size": 97, "max_position_embeddings": 2048, "torch_dtype": "float32"})";
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 16;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 600; ++i)
    ids.push_back(3 + (i * 41 + i / 7) % 90);
  engine_config one;
  one.model = dir.string();
  one.load_format = "dummy";
  one.seed = 4;
  one.kv_cache_memory = size_t{4} << 20;
  LLM uni{one};
  const auto expected = uni.generate(prompt{ids}, p).outputs.at(0).token_ids;
  {
    test::sim_cluster cluster{2, 1};
    engine_config c = cluster_config(cluster, 2, 1, dir.string());
    c.load_format = "dummy";
    c.seed = 4;
    c.decode_context_parallel_size = 2;
    LLM llm{c};
    CHECK(llm.info().executor == "cluster");
    CHECK(llm.info().block_size == 32);
    CHECK(llm.info().n_blocks == uni.info().n_blocks);  // each worker keeps 16 of a block's 32 positions
    CHECK(test::worker_pids_of(cluster.process("node-0").pid).size() == 1);
    CHECK(test::worker_pids_of(cluster.process("node-1").pid).size() == 1);
    CHECK(llm.generate(prompt{ids}, p).outputs.at(0).token_ids == expected);
  }
  {
    // Prefill context parallel: the 2 copies of a one-rank TP group on 2 nodes, the rows split between them.
    test::sim_cluster cluster{2, 1};
    engine_config c = cluster_config(cluster, 1, 1, dir.string());
    c.load_format = "dummy";
    c.seed = 4;
    c.prefill_context_parallel_size = 2;
    LLM llm{c};
    CHECK(llm.info().executor == "cluster");
    CHECK(llm.info().block_size == 32);
    CHECK(llm.generate(prompt{ids}, p).outputs.at(0).token_ids == expected);
  }
  fs::remove_all(dir);
}

TEST_CASE("cluster: tp x pp larger than the cluster fails within 1 s, listing every node's devices") {
  test::sim_cluster cluster{2, 2};
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    LLM llm{cluster_config(cluster, 4, 2)};
  } catch (const error& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(message);
  CHECK(seconds < 1.0);
  CHECK(message.find("tp 4 × pp 2 = 8 devices") != std::string::npos);
  CHECK(message.find("node 'node-0' (127.0.0.1): 2 cpu device(s)") != std::string::npos);
  CHECK(message.find("node 'node-1' (127.0.0.1): 2 cpu device(s)") != std::string::npos);
}

TEST_CASE("cluster: a node that does not see the model is named") {
  // A third node whose view of the model directory is an empty tmpfs (a private mount namespace): it runs on this
  // machine but, like a real node without the files, cannot see them.
  if (std::system("unshare --mount --propagation private true >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: this machine does not allow mount namespaces (unshare --mount)");
    return;
  }
  test::sim_cluster cluster{2, 2};
  const fs::path model = test::make_temp_dir("cluster-model") / "stories260K";
  fs::copy(test::model_dir("stories260K"), model, fs::copy_options::recursive);
  const fs::path log = cluster.dir() / "node-blind.log";
  const std::string command = fmt::format(
      "unshare --mount --propagation private sh -c 'mount -t tmpfs none {} && exec {} node --join {} "
      "--host 127.0.0.1 --cpu-devices 2 --node-id node-blind --cluster-token {}' >{} 2>&1",
      model.string(), test::actorllm_binary().string(), cluster.head_address(), cluster.token(), log.string());
  const pid_t blind = ::fork();
  REQUIRE(blind >= 0);
  if (blind == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(cluster.wait_for_nodes(3, 10s));
  std::string message;
  try {
    LLM llm{cluster_config(cluster, 2, 3, model.string())};  // 6 devices: every node takes part
  } catch (const error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("node 'node-blind'") != std::string::npos);
  CHECK(message.find("does not have the model") != std::string::npos);
  ::kill(blind, SIGTERM);
  ::waitpid(blind, nullptr, 0);
}

TEST_CASE("cluster: kill -9 of a node agent ends every running request, then serving resumes on the other nodes") {
  test::sim_cluster cluster{3, 2};  // a spare node to move to
  const golden_case g = greedy_from_bos();
  engine_config config = cluster_config(cluster, 2, 2);
  config.max_num_seqs = 8;  // the 32 requests take long enough that the kill finds them running or waiting
  LLM llm{config};
  REQUIRE(test::greedy_ids(llm, g) == g.output);
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
  REQUIRE(wait_until([&] { return started.load() >= 8; }, 10s));  // 8 run, 24 wait (max_num_seqs 8)
  // The agent that hosts workers (the placement fills node-0 first).
  std::string victim;
  for (const char* n : {"node-0", "node-1", "node-2"})
    if (victim.empty() && !test::worker_pids_of(cluster.process(n).pid).empty())
      victim = n;
  REQUIRE(!victim.empty());
  const auto t0 = std::chrono::steady_clock::now();
  cluster.process(victim).kill(SIGKILL);
  CHECK(wait_until([&] { return ended.load() == 32; }, 5s));
  MESSAGE("32 requests ended " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                               << " s after killing " << victim << "'s agent");
  CHECK(errors.load() == 32);
  CHECK(wait_until([&] { return llm.stats().healthy; }, 15s));
  CHECK(test::greedy_ids(llm, g) == g.output);
  CHECK(test::worker_pids_of(cluster.process(victim).pid).empty());
}

TEST_CASE("cluster: a failed restart waits and tries again, so a node that joins meanwhile is placed") {
  test::sim_cluster cluster{2, 2};  // no spare node: the first restart cannot place tp 2 x pp 2
  const golden_case g = greedy_from_bos();
  engine_config config = cluster_config(cluster, 2, 2);
  config.max_worker_restarts = 3;
  LLM llm{config};
  REQUIRE(test::greedy_ids(llm, g) == g.output);
  cluster.process("node-1").kill(SIGKILL);
  REQUIRE(wait_until([&] { return llm.stats().failure.find("restart failed") != std::string::npos; }, 20s));
  INFO(llm.stats().failure);
  CHECK(llm.stats().failure.find("cannot place") != std::string::npos);
  cluster.start_agent("node-2", 2, cluster.token());
  CHECK(wait_until([&] { return llm.stats().healthy; }, 15s));
  CHECK(test::greedy_ids(llm, g) == g.output);
}

TEST_CASE(
    "cluster: serve, kill -9 of a worker while 32 streams run: they end within 5 s, /health drops, serving resumes") {
  test::sim_cluster cluster{2, 2};
  e2e::server srv{{"-tp", "2", "-pp", "2", "--distributed-executor-backend", "cluster", "--cluster-address",
                   cluster.head_address(), "--max-worker-restarts", "3",
                   // 2 run at once and the rest wait, so the 32 streams last many seconds (all at once they could be
                   // done in about a second, before the kill)
                   "--max-num-seqs", "2"},
                  {"ACTORLLM_CLUSTER_TOKEN=" + cluster.token()}};
  const std::string body =
      R"({"model":"stories","prompt":"Once upon a time","max_tokens":400,"temperature":0.8,"ignore_eos":true,"stream":true})";
  std::vector<std::string> replies(32);
  std::vector<std::thread> clients;
  struct joiner {  // a failed REQUIRE must not leave joinable threads behind (std::terminate)
    std::vector<std::thread>& threads;
    ~joiner() {
      for (auto& t : threads)
        if (t.joinable())
          t.join();
    }
  } join_clients{clients};
  std::atomic<int> finished{0};
  for (int i = 0; i < 32; ++i)
    clients.emplace_back([&, i] {
      replies[static_cast<size_t>(i)] = e2e::http(srv.port(), "POST", "/v1/completions", body).body;
      ++finished;
    });
  REQUIRE(wait_until(
      [&] {
        auto m = e2e::http(srv.port(), "GET", "/metrics");
        auto running = e2e::metric(m.body, R"(actorllm:num_requests_running{model_name="stories"})");
        auto waiting = e2e::metric(m.body, R"(actorllm:num_requests_waiting{model_name="stories"})");
        return running && waiting && *running + *waiting >= 32;
      },
      10s));
  std::vector<pid_t> victims = test::worker_pids_of(cluster.process("node-1").pid);
  REQUIRE(!victims.empty());
  std::atomic<bool> saw_unhealthy{false};
  std::atomic<bool> polling{true};
  std::thread poller{[&] {
    while (polling)
      if (e2e::http(srv.port(), "GET", "/health").status != 200)
        saw_unhealthy = true;
  }};
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(victims.front(), SIGKILL);
  const bool all_ended = wait_until([&] { return finished.load() == 32; }, 5s);
  CHECK(all_ended);
  MESSAGE("32 streams ended " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                              << " s after the kill");
  const bool healthy_again = wait_until([&] { return e2e::http(srv.port(), "GET", "/health").status == 200; }, 15s);
  MESSAGE("/health " << std::string{healthy_again ? "200 again " : "still not 200 "}
                     << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                     << " s after the kill");
  polling = false;
  poller.join();
  for (auto& c : clients)
    c.join();
  // The restart's story is in the server's log (CI failed here once, 2026-12-07, without it).
  CHECK_MESSAGE(healthy_again, "the server's log, its end:\n" << tail_of(srv.log(), 6000));
  CHECK(saw_unhealthy);
  // Every request ended, within the 5 s above: with an error (a started stream: an error event and [DONE]; one
  // still waiting: a whole 503), or complete if it finished before the kill.
  int with_error = 0;
  for (const auto& r : replies) {
    INFO(tail_of(r, 600));
    const bool failed = r.find("\"error\"") != std::string::npos;
    with_error += failed ? 1 : 0;
    if (r.rfind("data: ", 0) == 0)
      CHECK(r.find("data: [DONE]") != std::string::npos);
    else
      CHECK(failed);
    if (!failed)
      CHECK(r.find("\"finish_reason\":\"length\"") != std::string::npos);
  }
  MESSAGE(with_error << " of 32 requests ended with the failure");
  CHECK(with_error >= 16);  // the kill hit running and waiting requests
  const auto after = e2e::http(srv.port(), "POST", "/v1/completions",
                               R"({"model":"stories","prompt":"Once upon a time","max_tokens":40,"temperature":0})");
  REQUIRE_MESSAGE(after.status == 200, after.body << "\nthe server's log, its end:\n" << tail_of(srv.log(), 6000));
  const std::string text = e2e::json_string(after.body, {"choices", "#", "text"});
  CHECK(text.size() > 20);
  CHECK(e2e::golden_continuation().rfind(text, 0) == 0);  // the golden continuation starts with it
}
