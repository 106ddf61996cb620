// `actorllm bench serve`: its pure parts (percentiles, metric aggregation, SSE parsing, workload, the address
// check) and one run of the real binary against a real `actorllm serve` on stories260K.
#include "apps/bench_serve/serve_metrics.hpp"
#include "apps/bench_serve/sse.hpp"
#include "apps/bench_serve/target_policy.hpp"
#include "apps/bench_serve/workload.hpp"
#include "support/die_with_parent.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

using namespace actorllm;
using namespace actorllm::app::bench;
using namespace std::chrono_literals;

TEST_CASE("percentile interpolates linearly between ranks, like numpy") {
  CHECK(percentile({}, 50) == 0);
  CHECK(percentile({7}, 99) == 7);
  CHECK(percentile({1, 2, 3, 4}, 50) == doctest::Approx(2.5));
  CHECK(percentile({4, 1, 3, 2}, 0) == 1);
  CHECK(percentile({4, 1, 3, 2}, 100) == 4);
  // numpy.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99) == 9.91
  CHECK(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99) == doctest::Approx(9.91));
  CHECK(percentile({10, 20}, 25) == doctest::Approx(12.5));
}

TEST_CASE("compute_metrics follows vLLM's definitions of TTFT, TPOT, ITL, E2EL and the throughputs") {
  request_result a;
  a.success = true;
  a.prompt_len = 10;
  a.output_tokens = 5;
  a.ttft = 0.1;
  a.latency = 0.5;  // TPOT = (0.5 - 0.1) / 4 = 0.1
  a.itl = {0.1, 0.1, 0.1, 0.1};
  request_result b;
  b.success = true;
  b.prompt_len = 20;
  b.output_tokens = 1;  // one token: no TPOT
  b.ttft = 0.3;
  b.latency = 0.3;
  request_result c;
  c.success = false;
  c.prompt_len = 30;
  c.error = "HTTP 400: bad";
  auto m = compute_metrics({a, b, c}, 2.0, {50, 99});
  CHECK(m.completed == 2);
  CHECK(m.failed == 1);
  CHECK(m.total_input_tokens == 30);
  CHECK(m.total_output_tokens == 6);
  CHECK(m.request_throughput == doctest::Approx(1.0));
  CHECK(m.output_throughput == doctest::Approx(3.0));
  CHECK(m.total_token_throughput == doctest::Approx(18.0));
  CHECK(m.ttft.mean_ms == doctest::Approx(200));
  CHECK(m.ttft.median_ms == doctest::Approx(200));
  CHECK(m.ttft.std_ms == doctest::Approx(100));
  CHECK(m.tpot.mean_ms == doctest::Approx(100));
  CHECK(m.itl.mean_ms == doctest::Approx(100));
  CHECK(m.e2el.mean_ms == doctest::Approx(400));
  REQUIRE(m.e2el.percentiles_ms.size() == 2);
  CHECK(m.e2el.percentiles_ms[1].first == 99);
  CHECK(m.e2el.percentiles_ms[1].second == doctest::Approx(300 + 200 * 0.99));

  auto none = compute_metrics({c}, 0.0, {99});
  CHECK(none.completed == 0);
  CHECK(none.request_throughput == 0);
  CHECK(none.ttft.mean_ms == 0);
  CHECK(none.ttft.percentiles_ms.at(0).second == 0);
}

TEST_CASE("the table and the JSON carry vLLM's names") {
  request_result a;
  a.success = true;
  a.prompt_len = 4;
  a.output_tokens = 3;
  a.ttft = 0.01;
  a.latency = 0.03;
  a.itl = {0.01, 0.01};
  run_description run;
  run.model_id = "m";
  run.num_prompts = 1;
  run.request_rate = std::numeric_limits<double>::infinity();
  run.max_concurrency = 4;
  run.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  auto m = compute_metrics({a}, 1.0, {50, 99.9});
  std::string table = format_table(run, m);
  CHECK(table.rfind("============ Serving Benchmark Result ============\n", 0) == 0);
  CHECK(table.find("Successful requests:                     1") != std::string::npos);
  CHECK(table.find("Maximum request concurrency:             4") != std::string::npos);
  CHECK(table.find("---------------Time to First Token----------------") != std::string::npos);
  CHECK(table.find("P99.9 ITL (ms):") != std::string::npos);
  CHECK(table.find("Median E2EL (ms):                        30.00") != std::string::npos);

  simdjson::dom::parser parser;
  auto doc = parser.parse(to_json(run, m, {a}));
  CHECK(std::string_view(doc["request_rate"]) == "inf");
  CHECK(int64_t(doc["completed"]) == 1);
  CHECK(double(doc["mean_ttft_ms"]) == doctest::Approx(10));
  CHECK(double(doc["p50_tpot_ms"]) == doctest::Approx(10));
  CHECK(double(doc["p99.9_itl_ms"]) == doctest::Approx(10));
  CHECK(double(doc["median_e2el_ms"]) == doctest::Approx(30));
  CHECK(double(doc["output_throughput"]) == doctest::Approx(3));
  CHECK(doc["itls"].get_array().at(0).get_array().size() == 2);

  run.percentile_metrics = {"ttft"};
  auto only_ttft = parser.parse(to_json(run, m, {a}));
  CHECK(only_ttft["mean_ttft_ms"].error() == simdjson::SUCCESS);
  CHECK(only_ttft["mean_itl_ms"].error() == simdjson::NO_SUCH_FIELD);
}

TEST_CASE("metric and percentile lists are checked") {
  CHECK(parse_percentiles("50, 90,99.9", "--metric-percentiles") == std::vector<double>{50, 90, 99.9});
  CHECK_THROWS_AS(parse_percentiles("101", "--metric-percentiles"), std::invalid_argument);
  CHECK_THROWS_AS(parse_percentiles("p99", "--metric-percentiles"), std::invalid_argument);
  CHECK(parse_metric_names("ttft,e2el", "--percentile-metrics") == std::vector<std::string>{"ttft", "e2el"});
  CHECK_THROWS_AS(parse_metric_names("ttft,latency", "--percentile-metrics"), std::invalid_argument);
  CHECK(percentile_word(99) == "99");
  CHECK(percentile_word(99.9) == "99.9");
}

TEST_CASE("sse_reader yields data payloads however the bytes are split") {
  const std::string stream = "data: {\"a\":1}\n\n: comment\r\ndata:{\"b\":2}\r\n\r\ndata: [DONE]\n\n";
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    sse_reader r;
    auto first = r.feed(std::string_view{stream}.substr(0, cut));
    auto second = r.feed(std::string_view{stream}.substr(cut));
    first.insert(first.end(), second.begin(), second.end());
    CHECK(first == std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"});
  }
}

TEST_CASE("parse_completion_chunk reads text, logprob tokens, usage and errors") {
  auto text = parse_completion_chunk(R"({"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]})");
  CHECK(text.text == " the");
  CHECK(text.carries_tokens());
  auto empty = parse_completion_chunk(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
  CHECK_FALSE(empty.carries_tokens());
  auto chat = parse_completion_chunk(R"({"choices":[{"index":0,"delta":{"content":" a"},"finish_reason":null}]})");
  CHECK(chat.text == " a");
  CHECK(chat.carries_tokens());
  auto role_only = parse_completion_chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})");
  CHECK(role_only.text.empty());
  auto lp = parse_completion_chunk(
      R"({"choices":[{"text":"","logprobs":{"tokens":[""],"token_logprobs":[-1.5],"top_logprobs":[{}]}}]})");
  CHECK(lp.logprob_tokens == 1);
  CHECK(lp.carries_tokens());
  auto usage =
      parse_completion_chunk(R"({"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":16,"total_tokens":32}})");
  CHECK_FALSE(usage.carries_tokens());
  CHECK(usage.prompt_tokens == 16);
  CHECK(usage.completion_tokens == 16);
  CHECK(parse_completion_chunk("[DONE]").done);
  CHECK(parse_completion_chunk(R"({"error":{"message":"boom","type":"x"}})").error == "boom");
  CHECK_THROWS_AS(parse_completion_chunk("{not json"), std::runtime_error);
  CHECK(error_message_of(R"({"error":{"message":"max_tokens is too large"}})") == "max_tokens is too large");
  CHECK(error_message_of("plain text\n") == "plain text");
}

TEST_CASE("random_requests: seeded, exact lengths at ratio 0, ids from 3 up to the vocabulary size") {
  random_dataset_options o;
  o.num_prompts = 50;
  o.input_len = 64;
  o.output_len = 16;
  o.vocab_size = 512;
  o.seed = 7;
  auto a = random_requests(o);
  REQUIRE(a.size() == 50);
  for (const auto& r : a) {
    CHECK(r.prompt_ids.size() == 64);
    CHECK(r.max_tokens == 16);
    for (int32_t id : r.prompt_ids) {
      REQUIRE(id >= 3);
      REQUIRE(id < 512);
    }
  }
  auto b = random_requests(o);
  CHECK(a.front().prompt_ids == b.front().prompt_ids);
  o.seed = 8;
  CHECK(random_requests(o).front().prompt_ids != a.front().prompt_ids);

  o.range_ratio = 0.5;
  bool varied = false;
  for (const auto& r : random_requests(o)) {
    CHECK(r.prompt_ids.size() >= 32);
    CHECK(r.prompt_ids.size() <= 96);
    CHECK(r.max_tokens >= 8);
    CHECK(r.max_tokens <= 24);
    varied = varied || r.prompt_ids.size() != 64;
  }
  CHECK(varied);
  o.vocab_size = 3;
  CHECK_THROWS_AS(random_requests(o), std::invalid_argument);
  o.vocab_size = 512;
  o.range_ratio = 1.0;
  CHECK_THROWS_AS(random_requests(o), std::invalid_argument);
}

TEST_CASE("random_requests: --random-prefix-len puts one shared prefix before each prompt's own tokens") {
  random_dataset_options o;
  o.num_prompts = 20;
  o.input_len = 16;
  o.output_len = 4;
  o.vocab_size = 512;
  o.seed = 3;
  const auto plain = random_requests(o);
  o.prefix_len = 40;
  const auto prefixed = random_requests(o);
  REQUIRE(prefixed.size() == 20);
  const std::vector<int32_t> prefix(prefixed.front().prompt_ids.begin(), prefixed.front().prompt_ids.begin() + 40);
  for (size_t i = 0; i < prefixed.size(); ++i) {
    const auto& ids = prefixed[i].prompt_ids;
    REQUIRE(ids.size() == 56);
    CHECK(std::equal(prefix.begin(), prefix.end(), ids.begin()));
    // The prompts' own tokens are the ones they had without a prefix.
    CHECK(std::equal(ids.begin() + 40, ids.end(), plain[i].prompt_ids.begin(), plain[i].prompt_ids.end()));
  }
  o.prefix_len = -1;
  CHECK_THROWS_AS(random_requests(o), std::invalid_argument);
}

TEST_CASE("arrival_offsets: all at once for inf, Poisson gaps with the asked mean otherwise") {
  auto burst = arrival_offsets(5, std::numeric_limits<double>::infinity(), 1.0, 0);
  CHECK(burst == std::vector<double>(5, 0.0));
  const int64_t n = 20000;
  auto poisson = arrival_offsets(n, 50.0, 1.0, 3);
  REQUIRE(poisson.size() == static_cast<std::size_t>(n));
  CHECK(poisson[0] == 0);
  double sum_sq = 0;
  for (std::size_t i = 1; i < poisson.size(); ++i) {
    const double gap = poisson[i] - poisson[i - 1];
    REQUIRE(gap >= 0);
    sum_sq += gap * gap;
  }
  const double mean_gap = poisson.back() / static_cast<double>(n - 1);
  CHECK(mean_gap == doctest::Approx(1.0 / 50).epsilon(0.03));
  // Exponential gaps: the coefficient of variation is 1.
  const double cv = std::sqrt(sum_sq / static_cast<double>(n - 1) - mean_gap * mean_gap) / mean_gap;
  CHECK(cv == doctest::Approx(1.0).epsilon(0.05));
  CHECK(arrival_offsets(10, 50.0, 1.0, 3) == arrival_offsets(10, 50.0, 1.0, 3));
  CHECK_THROWS_AS(arrival_offsets(3, 0.0, 1.0, 0), std::invalid_argument);
  CHECK_THROWS_AS(arrival_offsets(3, 1.0, 0.0, 0), std::invalid_argument);
}

TEST_CASE("only loopback and test-network addresses are allowed without --allow-remote") {
  CHECK(address_allowed_by_default("127.0.0.1"));
  CHECK(address_allowed_by_default("127.1.2.3"));
  CHECK(address_allowed_by_default("::1"));
  CHECK(address_allowed_by_default("10.0.0.2"));
  CHECK(address_allowed_by_default("192.168.1.10"));
  CHECK(address_allowed_by_default("::ffff:127.0.0.1"));
  CHECK(address_allowed_by_default("::ffff:10.1.2.3"));
  CHECK_FALSE(address_allowed_by_default("8.8.8.8"));
  CHECK_FALSE(address_allowed_by_default("172.217.0.1"));
  CHECK_FALSE(address_allowed_by_default("192.169.0.1"));
  CHECK_FALSE(address_allowed_by_default("11.0.0.1"));
  CHECK_FALSE(address_allowed_by_default("2001:db8::1"));
  CHECK_FALSE(address_allowed_by_default("::ffff:8.8.8.8"));
  CHECK_FALSE(address_allowed_by_default("localhost"));  // names are resolved first; the check sees addresses
  CHECK_FALSE(address_allowed_by_default(""));
}

TEST_CASE("parse_base_url splits host, port and prefix") {
  auto a = parse_base_url("http://127.0.0.1:8000");
  CHECK(a.host == "127.0.0.1");
  CHECK(a.port == 8000);
  CHECK(a.path_prefix.empty());
  auto b = parse_base_url("http://localhost/proxy/");
  CHECK(b.host == "localhost");
  CHECK(b.port == 80);
  CHECK(b.path_prefix == "/proxy");
  auto c = parse_base_url("http://[::1]:9000");
  CHECK(c.host == "::1");
  CHECK(c.port == 9000);
  CHECK_THROWS_AS(parse_base_url("https://127.0.0.1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("127.0.0.1:8000"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://127.0.0.1:99999"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://127.0.0.1:"), std::invalid_argument);
  CHECK_THROWS_AS(parse_base_url("http://:80"), std::invalid_argument);
}

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `actorllm serve` on stories260K on a free port (read back from its log); killed on destruction.
class stories_server {
 public:
  stories_server() {
    log_ = test::make_temp_dir("bench_serve") / "server.log";
    std::vector<std::string> args{test::actorllm_binary().string(),
                                  "serve",
                                  test::model_dir("stories260K").string(),
                                  "--port",
                                  "0",
                                  "--shutdown-timeout",
                                  "5"};
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      test::die_with_parent(parent);
      std::FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    const std::string marker = "Listening on http://127.0.0.1:";
    while (port_ == 0) {
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "server did not listen; log:\n" << read_text(log_));
      int status = 0;
      REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, "server exited; log:\n" << read_text(log_));
      std::string text = read_text(log_);
      if (auto at = text.find(marker); at != std::string::npos && text.find('\n', at) != std::string::npos)
        port_ = std::stoi(text.substr(at + marker.size()));
      else
        std::this_thread::sleep_for(10ms);  // polling the log file, not synchronising threads
    }
  }
  ~stories_server() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  stories_server(const stories_server&) = delete;
  stories_server& operator=(const stories_server&) = delete;
  int port() const { return port_; }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace

TEST_CASE("bench serve against a real server: 20 requests of 16 tokens, JSON result") {
  stories_server server;
  auto result = test::make_temp_dir("bench_serve") / "result.json";
  // bench serve itself waits out a server that is still starting: its first request is the initial test run.
  auto r = test::run_command(test::actorllm_binary().string() +
                             " bench serve --base-url http://127.0.0.1:" + std::to_string(server.port()) +
                             " --num-prompts 20 --random-input-len 16 --random-output-len 16 --max-concurrency 4"
                             " --random-vocab-size 512 --result-file " +
                             result.string());
  REQUIRE_MESSAGE(r.status == 0, r.out);
  CHECK(r.out.find("============ Serving Benchmark Result ============") != std::string::npos);
  simdjson::dom::parser parser;
  auto doc = parser.load(result.string());
  CHECK(int64_t(doc["completed"]) == 20);
  CHECK(int64_t(doc["failed"]) == 0);
  CHECK(int64_t(doc["total_input_tokens"]) == 20 * 16);
  CHECK(int64_t(doc["total_output_tokens"]) == 20 * 16);
  CHECK(int64_t(doc["max_concurrency"]) == 4);
  for (const char* key : {"duration", "request_throughput", "output_throughput", "total_token_throughput",
                          "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
                          "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms"}) {
    double v = -1;
    CHECK_MESSAGE(doc[key].get_double().get(v) == simdjson::SUCCESS, key);
    CHECK_MESSAGE(v > 0, key);
  }
  // 16 tokens make at most 16 text chunks, 15 gaps; fewer when a token ends mid-character (its text is held back
  // and comes with the next token's).
  std::size_t gaps = 0;
  for (auto itl : doc["itls"].get_array()) {
    CHECK(itl.get_array().size() <= 15);
    gaps += itl.get_array().size();
  }
  CHECK(gaps > 20 * 10);
}

TEST_CASE("bench serve fails clearly: no server, a remote host") {
  // A port nobody listens on: bind-free ports are not guaranteed, but port 1 on loopback needs root to listen.
  auto refused = test::run_command(test::actorllm_binary().string() +
                                   " bench serve --base-url http://127.0.0.1:1 --num-prompts 1 2>&1");
  CHECK(refused.status == 1);
  CHECK(refused.out.find("Connection refused") != std::string::npos);
  auto remote = test::run_command(test::actorllm_binary().string() +
                                  " bench serve --base-url http://8.8.8.8:80 --num-prompts 1 2>&1");
  CHECK(remote.status == 1);
  CHECK(remote.out.find("--allow-remote") != std::string::npos);
}
