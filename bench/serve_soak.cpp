// Soak test of a running `actorllm serve`: keeps --concurrency requests in flight for --duration seconds, mixing
// streamed and non-streamed completions and chat completions, clients that hang up mid-stream, before any answer
// or mid-request, and bad requests (malformed JSON, invalid values, unknown model or route, garbage HTTP, oversized
// heads and bodies) and the attacks of issue 30 (hostile structured outputs and limits, idle connections), and checks
// each outcome (serve_soak/soak_traffic.hpp). Before and after it reads the server's RSS and open descriptors
// (/proc/PID) and its KV-cache usage and request gauges (/metrics), and it sends the same temperature-0 request at the
// start and at the end. Leaks show as growth between two idle points, so "before" is taken after a warm-up of the same
// traffic (allocator caches and first-use growth are not leaks) and "after" once everything drained. Not in the default
// test run: scripts/soak.sh starts a server and runs this against it. Prints a table, writes JSON (--json PATH), exits
// 1 when a criterion fails, 2 when it cannot run.
#include "apps/bench_serve/http_client.hpp"
#include "apps/bench_serve/sse.hpp"
#include "apps/bench_serve/target_policy.hpp"
#include "bench/serve_soak/process_probe.hpp"
#include "bench/serve_soak/server_gauges.hpp"
#include "bench/serve_soak/soak_traffic.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>
#include <simdjson.h>
#include <CLI/CLI.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using actorllm::json_writer;
using actorllm::app::bench::http_reply;
using actorllm::app::bench::http_target;
using namespace actorllm::soak;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

/// One idle point: the process and its gauges.
struct idle_point {
  process_sample process;
  server_gauges gauges;
  bool drained = false;               ///< running and waiting reached 0 in time
  double settle_s = 0;                ///< seconds from the end of the traffic to this sample
  std::string description;            ///< when and how it was taken
  std::vector<std::string> fd_names;  ///< describe_fds() at the sample
  rss_split rss;                      ///< where the RSS is
};

/// Waits (bounded) until no request runs or waits, then (bounded) until the descriptors are at most `fd_target`
/// and the KV usage at most `kv_target` (`fd_target` < 0: until the descriptor count holds still for a second),
/// and samples.
idle_point settle(const soak_context& c, std::chrono::seconds drain_timeout, std::chrono::seconds settle_timeout,
                  int64_t fd_target, double kv_target, std::string description) {
  idle_point p;
  p.description = std::move(description);
  const auto start = steady::now();
  const auto drain_deadline = start + drain_timeout;
  for (;;) {
    p.process = sample_process(c.pid);
    if (!p.process.alive)
      throw std::runtime_error(fmt::format("the server (pid {}) is gone", c.pid));
    p.gauges = read_gauges(c.target);
    if (p.gauges.running == 0 && p.gauges.waiting == 0) {
      p.drained = true;
      break;
    }
    if (steady::now() >= drain_deadline)
      break;
    std::this_thread::sleep_for(200ms);  // polling a remote process: there is nothing to wait on
  }
  const auto settle_deadline = steady::now() + settle_timeout;
  int64_t last_fds = -1;
  auto steady_since = steady::now();
  for (;;) {
    // /proc is read before /metrics, so the previous /metrics connection had these 200 ms to close and the next
    // one is not open yet: neither is counted.
    std::this_thread::sleep_for(200ms);
    p.process = sample_process(c.pid);
    p.fd_names = describe_fds(c.pid);
    p.rss = read_rss_split(c.pid);
    p.gauges = read_gauges(c.target);
    if (p.process.fds != last_fds) {
      last_fds = p.process.fds;
      steady_since = steady::now();
    }
    const bool targets_met = fd_target >= 0 ? p.process.fds <= fd_target && p.gauges.kv_usage <= kv_target
                                            : steady::now() - steady_since >= 1s;
    if (targets_met || steady::now() >= settle_deadline)
      break;
  }
  p.settle_s = seconds_since(start);
  return p;
}

std::string reference_text(const soak_context& c, const std::string& prompt, int max_tokens) {
  json_writer w;
  w.begin_object();
  w.key("model").value(c.model).key("prompt").value(prompt).key("max_tokens").value(max_tokens);
  w.key("temperature").value(0.0);
  w.end_object();
  const http_reply r = actorllm::app::bench::http_call(c.target, "POST", "/v1/completions", w.str(), c.timeout);
  if (r.status != 200)
    throw std::runtime_error(fmt::format("the temperature-0 request answered {}: {}", r.status,
                                         actorllm::app::bench::error_message_of(r.body)));
  simdjson::dom::parser parser;
  std::string_view text;
  if (parser.parse(r.body).at_pointer("/choices/0/text").get_string().get(text))
    throw std::runtime_error("the temperature-0 request answered without choices[0].text: " + r.body);
  return std::string{text};
}

std::string first_model_id(const http_target& t) {
  const http_reply r = actorllm::app::bench::http_call(t, "GET", "/v1/models", {}, 10s);
  simdjson::dom::parser parser;
  std::string_view id;
  if (r.status != 200 || parser.parse(r.body).at_pointer("/data/0/id").get_string().get(id))
    throw std::runtime_error(fmt::format("GET {}/v1/models listed no model (give --model)", t.display));
  return std::string{id};
}

http_target resolve_loopback(const std::string& url_text) {
  const auto url = actorllm::app::bench::parse_base_url(url_text);
  if (!url.path_prefix.empty())
    throw std::invalid_argument("--base-url: no path prefix (the soak sends raw requests to the server's own paths)");
  asio::io_context io;
  asio::ip::tcp::resolver resolver{io};
  boost::system::error_code ec;
  const auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec)
    throw std::runtime_error(fmt::format("--base-url: cannot resolve '{}': {}", url.host, ec.message()));
  http_target t;
  for (const auto& entry : results) {
    // The server is a local process (its /proc is read): a remote address is a mistake.
    if (!actorllm::app::bench::address_allowed_by_default(entry.endpoint().address().to_string()))
      throw std::invalid_argument(fmt::format("--base-url: {} is not a loopback or test address", url_text));
    t.endpoints.push_back(entry.endpoint());
  }
  t.host_header = fmt::format("{}:{}", url.host, url.port);
  t.display = url_text;
  return t;
}

struct criterion {
  std::string name;
  bool passed = false;
  std::string detail;
};

/// The median RSS of the `quarter`-th quarter (0 to 3) of `series`; 0 when it has fewer than 8 points.
int64_t median_rss_kb(const std::vector<series_point>& series, std::size_t quarter) {
  const std::size_t n = series.size();
  if (n < 8)
    return 0;
  std::vector<int64_t> rss;
  for (std::size_t i = n * quarter / 4; i < n * (quarter + 1) / 4; ++i)
    rss.push_back(series[i].process.rss_kb);
  std::nth_element(rss.begin(), rss.begin() + static_cast<std::ptrdiff_t>(rss.size() / 2), rss.end());
  return rss[rss.size() / 2];
}

/// The descriptors of `later` that `idle` did not have.
std::vector<std::string> fds_beyond(const idle_point& idle, const idle_point& later) {
  std::vector<std::string> out;
  std::set_difference(later.fd_names.begin(), later.fd_names.end(), idle.fd_names.begin(), idle.fd_names.end(),
                      std::back_inserter(out));
  return out;
}

double mib(int64_t kb) { return static_cast<double>(kb) / 1024.0; }

void write_point(json_writer& w, const idle_point& p) {
  w.begin_object();
  w.key("description").value(p.description);
  w.key("rss_kb").value(p.process.rss_kb);
  w.key("hwm_kb").value(p.process.hwm_kb);
  w.key("fds").value(p.process.fds);
  w.key("threads").value(p.process.threads);
  w.key("kv_cache_usage_perc").value(p.gauges.kv_usage);
  w.key("num_requests_running").value(p.gauges.running);
  w.key("num_requests_waiting").value(p.gauges.waiting);
  w.key("aborted_total").value(p.gauges.aborted);
  w.key("drained").value(p.drained);
  w.key("settle_s").value(p.settle_s);
  w.key("fd_names").array(p.fd_names);
  w.key("rss_split_kb").begin_object();
  w.key("heap").value(p.rss.heap_kb).key("big_anon").value(p.rss.big_anon_kb).key("anon").value(p.rss.anon_kb);
  w.key("file").value(p.rss.file_kb).key("other").value(p.rss.other_kb);
  w.end_object();
  w.end_object();
}

void write_tallies(json_writer& w, const tallies& t) {
  w.begin_array();
  for (int i = 0; i < n_kinds; ++i) {
    const tally& k = t[static_cast<std::size_t>(i)];
    w.begin_object();
    w.key("kind").value(kinds[static_cast<std::size_t>(i)].name);
    w.key("expected").value(kinds[static_cast<std::size_t>(i)].expected);
    w.key("sent").value(k.sent);
    w.key("as_expected").value(k.as_expected);
    w.key("unexpected").value(k.unexpected());
    w.key("examples").begin_array();
    for (const auto& e : k.examples)
      w.value(e);
    w.end_array();
    w.end_object();
  }
  w.end_array();
}

struct soak_options {
  std::string base_url = "http://127.0.0.1:8000";
  int pid = 0;
  std::string model;
  double duration_s = 600;
  double warmup_s = 30;
  int concurrency = 32;
  uint64_t seed = 0;
  double request_timeout_s = 120;
  double drain_timeout_s = 120;
  double settle_timeout_s = 15;
  double max_rss_growth_pct = 5;
  double sample_every_s = 10;
  std::string reference_prompt = "Once upon a time";
  int reference_max_tokens = 32;
  std::string json_path = "bench/results/serve_soak.json";
};

int run(const soak_options& o) {
  if (o.pid <= 0)
    throw std::invalid_argument("--pid: give the server's process id");
  if (o.concurrency < 1)
    throw std::invalid_argument("--concurrency: must be at least 1");
  if (!(o.duration_s > 0) || o.warmup_s < 0)
    throw std::invalid_argument("--duration must be > 0 and --warmup >= 0");
  soak_context c;
  c.target = resolve_loopback(o.base_url);
  c.pid = static_cast<pid_t>(o.pid);
  c.timeout = std::chrono::milliseconds{static_cast<int64_t>(o.request_timeout_s * 1000)};
  if (!sample_process(c.pid).alive)
    throw std::invalid_argument(fmt::format("--pid {}: no such running process", o.pid));
  c.model = o.model.empty() ? first_model_id(c.target) : o.model;
  const auto drain_timeout = std::chrono::seconds{static_cast<int64_t>(o.drain_timeout_s)};
  const auto settle_timeout = std::chrono::seconds{static_cast<int64_t>(o.settle_timeout_s)};
  const auto sample_every = std::chrono::seconds{std::max<int64_t>(1, static_cast<int64_t>(o.sample_every_s))};

  std::fprintf(stderr, "serve_soak: %s (pid %d), model %s, concurrency %d, warm-up %.0f s, soak %.0f s\n",
               o.base_url.c_str(), o.pid, c.model.c_str(), o.concurrency, o.warmup_s, o.duration_s);
  const idle_point idle = settle(c, drain_timeout, settle_timeout, -1, 0, "idle, before any traffic");
  const std::string start_text = reference_text(c, o.reference_prompt, o.reference_max_tokens);

  std::vector<series_point> series;
  const auto series_start = steady::now();
  phase_result warm;
  if (o.warmup_s > 0) {
    std::fprintf(stderr, "serve_soak: warm-up, %.0f s of the same traffic (not counted in RSS growth)\n", o.warmup_s);
    warm = run_traffic(c, "warm-up", std::chrono::seconds{static_cast<int64_t>(o.warmup_s)}, o.concurrency, o.seed + 1,
                       series, series_start, sample_every);
  }
  idle_point before;
  if (!warm.server_died)
    before = settle(c, drain_timeout, settle_timeout, -1, 0, "after the warm-up, drained");
  std::fprintf(stderr, "serve_soak: soak, %.0f s\n", o.duration_s);
  phase_result soak;
  const std::size_t soak_series_begin = series.size();
  if (!warm.server_died)
    soak = run_traffic(c, "soak", std::chrono::seconds{static_cast<int64_t>(o.duration_s)}, o.concurrency, o.seed + 2,
                       series, series_start, sample_every);
  const bool died = warm.server_died || soak.server_died || !sample_process(c.pid).alive;
  idle_point after;
  std::string end_text;
  std::string late_error;
  if (!died) {
    try {
      after =
          settle(c, drain_timeout, settle_timeout, before.process.fds, idle.gauges.kv_usage, "after the soak, drained");
      end_text = reference_text(c, o.reference_prompt, o.reference_max_tokens);
    } catch (const std::exception& e) {
      late_error = e.what();
    }
  }
  const bool alive_at_end = sample_process(c.pid).alive;

  // Criteria.
  std::vector<criterion> criteria;
  const double growth = before.process.rss_kb > 0
                            ? 100.0 * static_cast<double>(after.process.rss_kb - before.process.rss_kb) /
                                  static_cast<double>(before.process.rss_kb)
                            : std::nan("");
  criteria.push_back({"server alive to the end", !died && alive_at_end && late_error.empty(),
                      died ? "the server process died" : late_error});
  criteria.push_back({"drained after the soak", after.drained,
                      fmt::format("running {}, waiting {}", after.gauges.running, after.gauges.waiting)});
  criteria.push_back(
      {fmt::format("RSS growth < {}%", o.max_rss_growth_pct), growth < o.max_rss_growth_pct,
       fmt::format("{:.1f} -> {:.1f} MiB: {:+.2f}%", mib(before.process.rss_kb), mib(after.process.rss_kb), growth)});
  criteria.push_back({"open fds back to idle", after.process.fds > 0 && after.process.fds <= before.process.fds,
                      fmt::format("{} after the warm-up, {} after the soak", before.process.fds, after.process.fds)});
  criteria.push_back({"KV usage back to idle", after.drained && after.gauges.kv_usage <= idle.gauges.kv_usage,
                      fmt::format("idle {:.6f}, after {:.6f}", idle.gauges.kv_usage, after.gauges.kv_usage)});
  criteria.push_back({"temperature-0 text unchanged", !end_text.empty() && end_text == start_text,
                      end_text == start_text ? "equal" : "different"});
  int64_t unexpected = 0;
  int64_t total = 0;
  for (int i = 0; i < n_kinds; ++i) {
    unexpected +=
        warm.counts[static_cast<std::size_t>(i)].unexpected() + soak.counts[static_cast<std::size_t>(i)].unexpected();
    total += soak.counts[static_cast<std::size_t>(i)].sent;
  }
  criteria.push_back({"every outcome as expected", unexpected == 0, fmt::format("{} unexpected", unexpected)});
  // /health is probed once a second beside the traffic (attacks included): it must answer 200 within a second.
  health_probe health = soak.health;
  health.probes += warm.health.probes;
  health.not_ok += warm.health.not_ok;
  health.over_1s += warm.health.over_1s;
  health.max_ms = std::max(health.max_ms, warm.health.max_ms);
  if (health.first_problem.empty())
    health.first_problem = warm.health.first_problem;
  criteria.push_back({"/health 200 within 1 s throughout",
                      health.probes > 0 && health.not_ok == 0 && health.over_1s == 0,
                      fmt::format("{} probes, {} not 200, {} over 1 s, slowest {:.0f} ms{}{}", health.probes,
                                  health.not_ok, health.over_1s, health.max_ms,
                                  health.first_problem.empty() ? "" : "; first: ", health.first_problem)});
  bool passed = true;
  for (const auto& cr : criteria)
    passed = passed && cr.passed;
  // A leak also shows under load, as a slope; a one-off step (a table grown to its peak size, memory malloc keeps)
  // does not: the median RSS of the soak's second quarter against its last quarter, shown, not a criterion.
  const std::vector<series_point> soak_series(series.begin() + static_cast<std::ptrdiff_t>(soak_series_begin),
                                              series.end());
  const int64_t q2_rss_kb = median_rss_kb(soak_series, 1);
  const int64_t q4_rss_kb = median_rss_kb(soak_series, 3);
  const double trend = q2_rss_kb > 0
                           ? 100.0 * static_cast<double>(q4_rss_kb - q2_rss_kb) / static_cast<double>(q2_rss_kb)
                           : std::nan("");
  // Every hang-up after a whole request should end as an abort on the server: shown, not a criterion, since a
  // request may also finish before the server sees its client go.
  const int64_t hang_ups = soak.counts[static_cast<std::size_t>(kind::hang_up_mid_stream)].as_expected +
                           soak.counts[static_cast<std::size_t>(kind::hang_up_before_answer)].as_expected;
  const double server_aborts = after.gauges.aborted - before.gauges.aborted;

  // The table.
  std::printf("\n================== Serve soak result ==================\n");
  std::printf("%-34s %s (pid %d), model %s\n", "Server:", o.base_url.c_str(), o.pid, c.model.c_str());
  std::printf("%-34s %d\n", "Concurrency:", o.concurrency);
  std::printf("%-34s %.1f s (warm-up %.1f s before it)\n", "Soak duration:", soak.seconds, warm.seconds);
  std::printf("%-34s %lld (%.1f/s)\n", "Soak requests:", static_cast<long long>(total),
              soak.seconds > 0 ? static_cast<double>(total) / soak.seconds : 0.0);
  std::printf("\n%-24s %-36s %8s %8s %10s %8s\n", "kind", "expected", "sent", "as exp.", "unexpected", "warm-up");
  for (int i = 0; i < n_kinds; ++i) {
    const tally& t = soak.counts[static_cast<std::size_t>(i)];
    std::printf("%-24s %-36s %8lld %8lld %10lld %8lld\n", kinds[static_cast<std::size_t>(i)].name,
                kinds[static_cast<std::size_t>(i)].expected, static_cast<long long>(t.sent),
                static_cast<long long>(t.as_expected), static_cast<long long>(t.unexpected()),
                static_cast<long long>(warm.counts[static_cast<std::size_t>(i)].sent));
  }
  std::printf("\n%-24s %14s %22s %16s\n", "", "idle (start)", "before (after warm-up)", "after (drained)");
  std::printf("%-24s %14.1f %22.1f %16.1f\n", "RSS (MiB)", mib(idle.process.rss_kb), mib(before.process.rss_kb),
              mib(after.process.rss_kb));
  std::printf("%-24s %14.1f %22.1f %16.1f\n", "peak RSS (MiB)", mib(idle.process.hwm_kb), mib(before.process.hwm_kb),
              mib(after.process.hwm_kb));
  const auto split_row = [&](const char* name, int64_t rss_split::*field) {
    std::printf("%-24s %14.1f %22.1f %16.1f\n", name, mib(idle.rss.*field), mib(before.rss.*field),
                mib(after.rss.*field));
  };
  split_row("  in [heap]", &rss_split::heap_kb);
  split_row("  in anon > 64 MiB (KV)", &rss_split::big_anon_kb);
  split_row("  in other anon", &rss_split::anon_kb);
  split_row("  in files", &rss_split::file_kb);
  std::printf("%-24s %14lld %22lld %16lld\n", "open fds", static_cast<long long>(idle.process.fds),
              static_cast<long long>(before.process.fds), static_cast<long long>(after.process.fds));
  std::printf("%-24s %14lld %22lld %16lld\n", "threads", static_cast<long long>(idle.process.threads),
              static_cast<long long>(before.process.threads), static_cast<long long>(after.process.threads));
  std::printf("%-24s %14.6f %22.6f %16.6f\n", "KV cache usage", idle.gauges.kv_usage, before.gauges.kv_usage,
              after.gauges.kv_usage);
  std::printf("%-24s %8.0f / %-3.0f %16.0f / %-3.0f %10.0f / %-3.0f\n", "running / waiting", idle.gauges.running,
              idle.gauges.waiting, before.gauges.running, before.gauges.waiting, after.gauges.running,
              after.gauges.waiting);
  std::printf("%-24s %14.0f %22.0f %16.0f\n", "aborted (server total)", idle.gauges.aborted, before.gauges.aborted,
              after.gauges.aborted);
  std::printf("\nRSS under load, median of the soak's 2nd quarter -> last quarter: %.1f -> %.1f MiB (%+.2f%%)\n",
              mib(q2_rss_kb), mib(q4_rss_kb), trend);
  std::printf("(a leak grows here too; a one-off step before the 2nd quarter does not)\n");
  std::printf("Server-counted aborts during the soak: %.0f; client hang-ups after a whole request: %lld\n",
              server_aborts, static_cast<long long>(hang_ups));
  std::printf(
      "\nRSS 'before' is taken after a %.0f s warm-up of the same traffic, drained: allocator caches and\n"
      "first-use growth are not leaks. 'after' once running and waiting are 0 (took %.1f s).\n",
      warm.seconds, after.settle_s);
  std::printf("\ntemperature-0 text at the start: \"%s\"\n", start_text.c_str());
  std::printf("temperature-0 text at the end:   \"%s\"\n\n", end_text.c_str());
  for (const auto& cr : criteria)
    std::printf("%-4s %-32s %s\n", cr.passed ? "ok" : "FAIL", cr.name.c_str(), cr.detail.c_str());
  for (int i = 0; i < n_kinds; ++i)
    for (const auto* t : {&warm.counts[static_cast<std::size_t>(i)], &soak.counts[static_cast<std::size_t>(i)]})
      for (const auto& e : t->examples)
        std::printf("  unexpected %s: %s\n", kinds[static_cast<std::size_t>(i)].name, e.c_str());
  for (const idle_point* p : {&before, &after})
    for (const auto& name : fds_beyond(idle, *p))
      std::printf("  open %s, not at idle: %s\n", p->description.c_str(), name.c_str());
  std::printf("Result: %s\n", passed ? "PASS" : "FAIL");
  std::fflush(stdout);

  // The JSON.
  json_writer w;
  w.begin_object();
  w.key("benchmark").value("serve_soak");
  w.key("base_url").value(o.base_url);
  w.key("pid").value(o.pid);
  w.key("model").value(c.model);
  w.key("concurrency").value(o.concurrency);
  w.key("seed").value(o.seed);
  w.key("warmup_s").value(warm.seconds);
  w.key("duration_s").value(soak.seconds);
  w.key("requests").value(total);
  w.key("requests_per_s").value(soak.seconds > 0 ? static_cast<double>(total) / soak.seconds : 0.0);
  w.key("health").begin_object();
  w.key("probes").value(health.probes).key("not_ok").value(health.not_ok).key("over_1s").value(health.over_1s);
  w.key("max_ms").value(health.max_ms).end_object();
  w.key("kinds");
  write_tallies(w, soak.counts);
  w.key("warmup_kinds");
  write_tallies(w, warm.counts);
  w.key("idle");
  write_point(w, idle);
  w.key("before");
  write_point(w, before);
  w.key("after");
  write_point(w, after);
  w.key("rss_trend").begin_object();
  w.key("q2_median_kb").value(q2_rss_kb).key("q4_median_kb").value(q4_rss_kb).key("pct").value(trend);
  w.end_object();
  w.key("client_hang_ups").value(hang_ups);
  w.key("server_aborts").value(server_aborts);
  w.key("rss_growth_pct").value(growth);
  w.key("max_rss_growth_pct").value(o.max_rss_growth_pct);
  w.key("reference").begin_object();
  w.key("prompt").value(o.reference_prompt).key("max_tokens").value(o.reference_max_tokens);
  w.key("start_text").value(start_text).key("end_text").value(end_text).key("equal").value(start_text == end_text);
  w.end_object();
  w.key("criteria").begin_array();
  for (const auto& cr : criteria)
    w.begin_object()
        .key("name")
        .value(cr.name)
        .key("passed")
        .value(cr.passed)
        .key("detail")
        .value(cr.detail)
        .end_object();
  w.end_array();
  w.key("passed").value(passed);
  w.key("series").begin_array();
  for (const auto& p : series)
    w.begin_object()
        .key("t_s")
        .value(p.t_s)
        .key("rss_kb")
        .value(p.process.rss_kb)
        .key("fds")
        .value(p.process.fds)
        .key("threads")
        .value(p.process.threads)
        .end_object();
  w.end_array();
  w.end_object();
  const std::filesystem::path out{o.json_path};
  if (out.has_parent_path())
    std::filesystem::create_directories(out.parent_path());
  std::ofstream file{out};
  file << w.str() << "\n";
  if (!file)
    throw std::runtime_error("--json: cannot write " + o.json_path);
  std::fprintf(stderr, "wrote %s\n", o.json_path.c_str());
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Soak test of a running `actorllm serve`: mixed traffic at a fixed concurrency; RSS, fds, KV usage "
      "and a temperature-0 text compared before and after (scripts/soak.sh runs it)"};
  soak_options o;
  app.add_option("--base-url", o.base_url, "The server (loopback or a test address)")->capture_default_str();
  app.add_option("--pid", o.pid, "The server's process id, for /proc/PID")->required();
  app.add_option("--model", o.model, "Model name to send (default: the first id of GET /v1/models)");
  app.add_option("--duration", o.duration_s, "Seconds of soak traffic")->capture_default_str();
  app.add_option("--warmup", o.warmup_s, "Seconds of the same traffic before the 'before' sample")
      ->capture_default_str();
  app.add_option("--concurrency", o.concurrency, "Requests in flight")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the traffic mix")->capture_default_str();
  app.add_option("--request-timeout", o.request_timeout_s, "Seconds one request may take")->capture_default_str();
  app.add_option("--drain-timeout", o.drain_timeout_s, "Seconds to wait for running and waiting to reach 0")
      ->capture_default_str();
  app.add_option("--settle-timeout", o.settle_timeout_s,
                 "Seconds, once drained, for fds and KV usage to come back to their idle values")
      ->capture_default_str();
  app.add_option("--max-rss-growth", o.max_rss_growth_pct, "Largest RSS growth in percent that passes")
      ->capture_default_str();
  app.add_option("--sample-every", o.sample_every_s, "Seconds between RSS samples of the series")
      ->capture_default_str();
  app.add_option("--reference-prompt", o.reference_prompt, "Prompt of the temperature-0 request")
      ->capture_default_str();
  app.add_option("--reference-max-tokens", o.reference_max_tokens, "max_tokens of the temperature-0 request")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "Where to write the JSON result")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);  // a server that closes early must not kill the client
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_serve_soak: %s\n", e.what());
    return 2;
  }
}
