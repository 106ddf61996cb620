// `actorllm bench serve`: a load generator for an OpenAI-compatible server, like `vllm bench serve` with its
// random dataset: random token-id prompts, Poisson arrivals, optional concurrency cap, and vLLM's serving
// metrics (TTFT, TPOT, ITL, E2EL, throughputs) as a table and, with --result-file, as JSON.
#include "apps/bench_serve/http_client.hpp"
#include "apps/bench_serve/load_generator.hpp"
#include "apps/bench_serve/serve_metrics.hpp"
#include "apps/bench_serve/sse.hpp"
#include "apps/bench_serve/target_policy.hpp"
#include "apps/bench_serve/workload.hpp"
#include "apps/command_registry.hpp"

#include "text/tokenizer.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>

namespace actorllm::app {
namespace {

using namespace bench;

struct bench_serve_options {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  int64_t num_prompts = 100;
  int64_t random_input_len = 128;
  int64_t random_prefix_len = 0;
  int64_t random_output_len = 128;
  double random_range_ratio = 0;
  int32_t random_vocab_size = 0;  // 0: from --tokenizer, else 256
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int64_t max_concurrency = 0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  int32_t logprobs = -1;  // -1: none, unless the server has no tokenizer (then 0)
  std::string result_file;
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
  std::string metric_percentiles = "99";
  bool allow_remote = false;
  std::string tokenizer;
  double request_timeout = 600;
};

constexpr int32_t default_vocab_size = 256;

double parse_rate(const std::string& text) {
  if (text == "inf" || text == "infinity")
    return std::numeric_limits<double>::infinity();
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0))
    throw std::invalid_argument(fmt::format("--request-rate: '{}' is not a positive number or inf", text));
  return v;
}

// Resolves the base URL's host and keeps the benchmark on loopback and test hosts unless --allow-remote.
http_target resolve_target(const base_url& url, const bench_serve_options& o) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver{io};
  boost::system::error_code ec;
  auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec)
    throw std::runtime_error(fmt::format("--base-url: cannot resolve '{}': {}", url.host, ec.message()));
  http_target t;
  for (const auto& entry : results) {
    const auto address = entry.endpoint().address().to_string();
    if (!o.allow_remote && !address_allowed_by_default(address))
      throw std::runtime_error(fmt::format(
          "refusing to send load to {} ({} resolves to {}): without --allow-remote only loopback (127.0.0.0/8, ::1) "
          "and test hosts (10.0.0.0/8, 192.168.0.0/16) are allowed",
          o.base_url, url.host, address));
    t.endpoints.push_back(entry.endpoint());
  }
  if (t.endpoints.empty())
    throw std::runtime_error(fmt::format("--base-url: '{}' resolves to no address", url.host));
  t.host_header = url.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", url.host, url.port)
                                                          : fmt::format("{}:{}", url.host, url.port);
  t.display = o.base_url;
  t.api_key = o.api_key;
  return t;
}

// The first model id of GET /v1/models.
std::string first_model_id(const http_target& t, const std::string& prefix, std::chrono::milliseconds timeout) {
  auto reply = http_call(t, "GET", prefix + "/v1/models", {}, timeout);
  if (reply.status != 200)
    throw std::runtime_error(fmt::format("GET {}/v1/models answered {}: {} (give --model)", t.display, reply.status,
                                         error_message_of(reply.body)));
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view id;
  if (parser.parse(reply.body).get(doc) != simdjson::SUCCESS ||
      doc.at_pointer("/data/0/id").get_string().get(id) != simdjson::SUCCESS)
    throw std::runtime_error(fmt::format("GET {}/v1/models listed no model (give --model)", t.display));
  return std::string{id};
}

// A server without a tokenizer streams no text (only the last chunk), so its tokens are timed through per-token
// logprobs instead. Our server answers /detokenize with 400 "...no tokenizer" then; others answer 200 or 404.
bool server_lacks_tokenizer(const http_target& t, const std::string& prefix, std::chrono::milliseconds timeout) {
  auto reply = http_call(t, "POST", prefix + "/detokenize", R"({"tokens":[]})", timeout);
  return reply.status == 400 && error_message_of(reply.body).find("no tokenizer") != std::string::npos;
}

std::string now_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

int run_bench_serve(const bench_serve_options& o) {
  // Every flag check first, before touching the network.
  const base_url url = parse_base_url(o.base_url);
  if (o.endpoint.empty() || o.endpoint.front() != '/')
    throw std::invalid_argument(fmt::format("--endpoint: '{}' must start with '/'", o.endpoint));
  const double rate = parse_rate(o.request_rate);
  if (o.max_concurrency < 0)
    throw std::invalid_argument(fmt::format("--max-concurrency: must be positive, got {}", o.max_concurrency));
  if (!(o.request_timeout > 0))
    throw std::invalid_argument(fmt::format("--request-timeout: must be positive, got {}", o.request_timeout));
  if (o.logprobs < -1 || o.logprobs > 20)
    throw std::invalid_argument(fmt::format("--logprobs: must be in [0, 20], got {}", o.logprobs));
  const auto percentiles = parse_percentiles(o.metric_percentiles, "--metric-percentiles");
  const auto metric_names = parse_metric_names(o.percentile_metrics, "--percentile-metrics");

  random_dataset_options ds;
  ds.num_prompts = o.num_prompts;
  ds.input_len = o.random_input_len;
  ds.prefix_len = o.random_prefix_len;
  ds.output_len = o.random_output_len;
  ds.range_ratio = o.random_range_ratio;
  ds.seed = o.seed;
  ds.vocab_size = o.random_vocab_size;
  if (ds.vocab_size == 0)
    ds.vocab_size =
        o.tokenizer.empty() ? default_vocab_size : text::tokenizer::from_directory(o.tokenizer).vocab_size();
  validate(ds);
  const auto offsets = arrival_offsets(o.num_prompts, rate, o.burstiness, o.seed);

  const http_target target = resolve_target(url, o);
  const auto timeout = std::chrono::milliseconds{static_cast<int64_t>(o.request_timeout * 1000)};
  const auto probe_timeout = std::min(timeout, std::chrono::milliseconds{30'000});

  load_plan plan;
  plan.target = target;
  plan.path = url.path_prefix + o.endpoint;
  plan.max_concurrency = o.max_concurrency;
  plan.timeout = timeout;
  plan.offsets = offsets;
  plan.requests = random_requests(ds);
  plan.request.ignore_eos = o.ignore_eos;
  try {
    plan.request.model = o.model.empty() ? first_model_id(target, url.path_prefix, probe_timeout) : o.model;
    if (o.logprobs >= 0) {
      plan.request.logprobs = o.logprobs;
    } else if (server_lacks_tokenizer(target, url.path_prefix, probe_timeout)) {
      plan.request.logprobs = 0;
      std::fprintf(stderr, "The server has no tokenizer: asking for logprobs 0 to time each token.\n");
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("{} (is the server running?)", e.what()));
  }

  std::printf(
      "Benchmarking %s%s, model %s: %lld prompts of %lld shared + %lld tokens (vocab %d), %lld output tokens, rate "
      "%s, max concurrency %s\n",
      o.base_url.c_str(), o.endpoint.c_str(), plan.request.model.c_str(), static_cast<long long>(o.num_prompts),
      static_cast<long long>(o.random_prefix_len), static_cast<long long>(o.random_input_len), ds.vocab_size,
      static_cast<long long>(o.random_output_len), o.request_rate.c_str(),
      o.max_concurrency > 0 ? std::to_string(o.max_concurrency).c_str() : "none");

  // One request first, as vLLM does: a server that cannot serve the workload fails here with its own message.
  std::printf("Starting initial single prompt test run...\n");
  std::fflush(stdout);
  {
    load_plan probe = plan;
    probe.requests.resize(1);
    probe.offsets.assign(1, 0.0);
    const auto first = run_load(probe).results.front();
    if (!first.success)
      throw std::runtime_error(fmt::format("the initial test run failed: {}", first.error));
  }
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  std::fflush(stdout);

  const load_outcome outcome = run_load(plan);
  const benchmark_metrics metrics = compute_metrics(outcome.results, outcome.duration_s, percentiles);

  run_description run;
  run.date = now_stamp();
  run.base_url = o.base_url;
  run.endpoint = o.endpoint;
  run.model_id = plan.request.model;
  run.num_prompts = o.num_prompts;
  run.request_rate = rate;
  run.burstiness = o.burstiness;
  run.max_concurrency = o.max_concurrency;
  run.percentile_metrics = metric_names;
  std::printf("%s", format_table(run, metrics).c_str());
  std::fflush(stdout);  // the table before the error summary on stderr
  for (const auto& r : outcome.results)
    if (!r.success) {
      std::fprintf(stderr, "%lld of %lld requests failed; the first error: %s\n",
                   static_cast<long long>(metrics.failed), static_cast<long long>(o.num_prompts), r.error.c_str());
      break;
    }
  if (!o.result_file.empty()) {
    std::ofstream out{o.result_file, std::ios::binary};
    out << to_json(run, metrics, outcome.results) << "\n";
    if (!out)
      throw std::runtime_error(fmt::format("--result-file: cannot write '{}'", o.result_file));
  }
  return metrics.failed == 0 ? 0 : 1;
}

command_registration bench_command{
    "bench", "Benchmarks (bench serve: load-test a running server)", [](CLI::App& sub) {
      sub.require_subcommand(1);
      auto o = std::make_shared<bench_serve_options>();
      auto* serve = sub.add_subcommand("serve", "Load-test an OpenAI-compatible server, like `vllm bench serve`");
      serve->footer(
          "Prompts are random token ids in [3, V): V is --random-vocab-size, else the vocabulary of --tokenizer, else "
          "256 (the API does not tell a model's vocabulary). Only loopback and test hosts (127.0.0.0/8, ::1, "
          "10.0.0.0/8, 192.168.0.0/16) are benchmarked unless --allow-remote. Exit status 1 when any request failed.");
      serve->add_option("--base-url", o->base_url, "Server to load (http only)")->capture_default_str();
      serve->add_option("--endpoint", o->endpoint, "Completions endpoint")->capture_default_str();
      serve->add_option("--model", o->model, "Model name to send (default: the first id of GET /v1/models)");
      serve->add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'");
      serve->add_option("--num-prompts", o->num_prompts, "Number of requests")->capture_default_str();
      serve->add_option("--random-input-len", o->random_input_len, "Prompt tokens per request")->capture_default_str();
      serve
          ->add_option("--random-prefix-len", o->random_prefix_len,
                       "Tokens of one random prefix every prompt starts with, before its own input tokens")
          ->capture_default_str();
      serve->add_option("--random-output-len", o->random_output_len, "Output tokens per request (max_tokens)")
          ->capture_default_str();
      serve
          ->add_option("--random-range-ratio", o->random_range_ratio,
                       "Lengths drawn uniformly from [len*(1-r), len*(1+r)]")
          ->capture_default_str();
      serve->add_option("--random-vocab-size", o->random_vocab_size,
                        "Draw prompt ids from [3, N) (default: --tokenizer's vocabulary, else 256)");
      serve->add_option("--tokenizer", o->tokenizer, "Tokenizer directory, for the vocabulary size");
      serve
          ->add_option("--request-rate", o->request_rate, "Requests per second (Poisson arrivals), or inf: all at once")
          ->capture_default_str();
      serve->add_option("--burstiness", o->burstiness, "Gamma shape of the arrival gaps (1: Poisson)")
          ->capture_default_str();
      serve->add_option("--max-concurrency", o->max_concurrency, "Most requests in flight at once (default: no limit)");
      serve->add_option("--seed", o->seed, "Seed of the prompts and arrival times")->capture_default_str();
      serve->add_flag("--ignore-eos,!--no-ignore-eos", o->ignore_eos,
                      "Send ignore_eos so outputs have the asked length (default; --no-ignore-eos: stop at EOS)");
      serve->add_option("--logprobs", o->logprobs,
                        "Ask for N logprobs per token (default: none, or 0 when the server has no tokenizer)");
      serve->add_option("--result-file", o->result_file, "Write the result as JSON here");
      serve->add_option("--percentile-metrics", o->percentile_metrics, "Metrics to report: any of ttft,tpot,itl,e2el")
          ->capture_default_str();
      serve->add_option("--metric-percentiles", o->metric_percentiles, "Percentiles to report, e.g. 50,90,99")
          ->capture_default_str();
      serve->add_option("--request-timeout", o->request_timeout, "Seconds one request may take before it counts failed")
          ->capture_default_str();
      serve->add_flag("--allow-remote", o->allow_remote, "Allow hosts other than loopback and test networks");
      return [o, serve]() {
        if (!serve->parsed())
          throw std::invalid_argument("give a benchmark: `actorllm bench serve ...`");
        return run_bench_serve(*o);
      };
    }};

}  // namespace
}  // namespace actorllm::app
