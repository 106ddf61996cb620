// fuzz_http: the HTTP front end's fuzzer as a program, for runs longer than test_net's bounded one. Without --port it
// fuzzes an in-process server (test_server.hpp); with --port it fuzzes a server already running on 127.0.0.1 (e.g.
// `ACTORLLM_HTTP_READ_TIMEOUT_S=1 actorllm serve MODEL --max-body-bytes 4096`). Exits 1 on any failure.
//
//   fuzz_http --seconds 600 [--seed S] [--parallel 8]
//   fuzz_http --case SEED            # replays one case and prints what came back
//   fuzz_http --port 8000 --paths /v1/completions,/v1/chat/completions,/health --probe /health --max-body-bytes 4096
#include "fuzz/http_fuzz.hpp"
#include "fuzz/raw_client.hpp"
#include "fuzz/test_server.hpp"
#include "util/log.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <random>

using namespace actorllm;

int main(int argc, char** argv) {
  CLI::App app{"Fuzzes the HTTP front end with raw-byte clients"};
  double seconds = 60;
  std::optional<uint64_t> seed;
  std::optional<uint64_t> one_case;
  uint64_t max_inputs = 0;
  int port = 0;
  int parallel = 16;
  int hang_ms = 5000;
  std::string probe_target;
  std::vector<std::string> paths;
  std::size_t max_body_bytes = 4096;
  std::size_t max_header_bytes = 8 * 1024;
  app.add_option("--seconds", seconds, "How long to fuzz")->capture_default_str();
  app.add_option("--seed", seed, "The campaign's seed (default: random, printed)");
  app.add_option("--case", one_case, "Replay the one case with this seed and print its outcome");
  app.add_option("--inputs", max_inputs, "Stop after this many inputs as well (0: no limit)");
  app.add_option("--port", port, "Fuzz the server on 127.0.0.1:PORT instead of an in-process one");
  app.add_option("--parallel", parallel, "Connections played at once")->capture_default_str();
  app.add_option("--hang-ms", hang_ms, "A connection must be answered or closed within this")->capture_default_str();
  app.add_option("--probe", probe_target,
                 "The GET that must answer 200 every half second (default /json, or /health "
                 "with --port)");
  app.add_option("--paths", paths, "Targets the requests aim at (with --port)")->delimiter(',');
  app.add_option("--max-body-bytes", max_body_bytes, "The server's body limit (to aim around it)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", max_header_bytes, "The server's head limit")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  fuzz::campaign_options o;
  o.seed = seed.value_or(std::random_device{}() * 0x100000001ull ^ std::random_device{}());
  o.duration = std::chrono::milliseconds{static_cast<int64_t>(seconds * 1000)};
  o.max_inputs = max_inputs;
  o.parallel = parallel;
  o.hang_bound = std::chrono::milliseconds{hang_ms};
  o.profile.max_body_bytes = max_body_bytes;
  o.profile.max_header_bytes = max_header_bytes;
  o.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };

  std::optional<fuzz::test_server> server;
  if (port == 0) {
    log::set_threshold(log::level::error);  // one info line per request would drown the report
    auto so = fuzz::test_server_options();
    so.max_body_bytes = max_body_bytes;
    so.max_header_bytes = max_header_bytes;
    server.emplace(so);
    o.port = server->port();
    o.probe_target = probe_target.empty() ? "/json" : probe_target;
    o.health = [&server] {
      if (!server->running())
        return "the server stopped: " + server->failure();
      if (server->connection_errors() > 0)
        return fmt::format("{} connection(s) ended on an exception (see the log)", server->connection_errors());
      return std::string{};
    };
  } else {
    o.port = static_cast<uint16_t>(port);
    o.probe_target = probe_target.empty() ? "/health" : probe_target;
    o.profile.paths = paths.empty() ? std::vector<std::string>{"/v1/completions", "/v1/chat/completions", "/health",
                                                               "/tokenize",       "/v1/models",           "/metrics"}
                                    : paths;
    o.allowed_statuses.insert(o.allowed_statuses.end(), {401, 405, 429});
  }

  if (one_case) {
    const fuzz::fuzz_case c = fuzz::generate_case(*one_case, o.profile);
    std::printf("%s\n", c.describe().c_str());
    const fuzz::case_outcome r = fuzz::run_case(o.port, c, o.hang_bound, o.allowed_statuses);
    std::string statuses;
    for (int st : r.statuses)
      statuses += fmt::format(" {}", st);
    std::printf("statuses:%s; %s; %zu bytes received; %s\n", statuses.c_str(), r.closed ? "closed" : "open", r.received,
                r.problem.empty() ? "ok" : ("FAILURE: " + r.problem).c_str());
    return r.problem.empty() ? 0 : 1;
  }

  std::fprintf(stderr, "http fuzz: seed %#llx, %.0f s, port %u%s\n", static_cast<unsigned long long>(o.seed), seconds,
               o.port, server ? " (in-process)" : "");
  const fuzz::campaign_report report = fuzz::run_campaign(o);
  std::printf("%s\n", report.summary().c_str());
  bool ok = report.failures.empty();
  if (server) {
    const auto took = server->stop();
    std::printf("in-process server stopped in %lld ms; %d connection error(s)%s\n",
                static_cast<long long>(took.count()), server->connection_errors(),
                server->failure().empty() ? "" : ("; it failed: " + server->failure()).c_str());
    ok = ok && took < std::chrono::seconds{5} && server->failure().empty() && server->connection_errors() == 0;
  }
  return ok ? 0 : 1;
}
