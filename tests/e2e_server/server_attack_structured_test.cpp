// Issue 30's structured-output attacks against the real `actorllm serve` (stories260K): regexes nested 20,000 deep or
// with 100,000 stacked quantifiers (they overflowed the parser's stack: SIGSEGV), through every field that carries a
// pattern; the (.{0,100}){0,100} pair that held both preprocessing threads for minutes; schemas whose pattern grows
// exponentially; tool_choice "required" over 300 tools (16 s). For each: the process stays up, /health answers
// within 1 s while the attack runs, a well-behaved completion finishes within 2 s of its normal latency, the
// server's peak memory stays under a stated bound, and the hostile request gets a 400 whose param is its field and
// whose message names the limit's flag.
#include "server_harness.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm::e2e;
using namespace std::chrono_literals;

namespace {

const std::string normal_completion = R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0})";
// How much the server's peak memory may grow over its resident size before an attack. Compiling one pattern is
// bounded by the default limits at about 100 MB (state sets and table at 51 MB each at worst); two preprocessing
// threads may compile at once.
constexpr long memory_growth_bound_kb = 300 * 1024;

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

// A JSON string literal holding `s` (backslashes and quotes escaped).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(field + ":"))
      return std::stol(line.substr(field.size() + 1));
  FAIL("no " << field << " in /proc/" << pid << "/status");
  return 0;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = steady::now();
  f();
  return std::chrono::duration<double>(steady::now() - t0).count();
}

// The normal request's latency with nothing else running (the slowest of three, the first warms the caches).
double normal_latency(const server& s) {
  double worst = 0;
  for (int i = 0; i < 3; ++i)
    worst = std::max(worst, seconds_of([&] {
                       auto r = http(s.port(), "POST", "/v1/completions", normal_completion);
                       REQUIRE_MESSAGE(r.status == 200, r.body);
                     }));
  return worst;
}

// While `attackers` threads each send `per_attacker` hostile requests (`attack` sends one), the server answers
// /health within 1 s and the normal request within 2 s of `baseline` (probed at least once while they run, at most
// three times); then the process is still alive. A bounded attack, not an endless flood: on two cores, two threads
// burning CPU without pause slow any work, which is a matter of rate limits, not of one request's cost.
void check_served_during(server& s, double baseline, const std::function<void()>& attack, int attackers,
                         int per_attacker) {
  // Stopped and joined however this scope ends (a failed REQUIRE below throws).
  struct attack_threads {
    std::atomic<bool> stop{false};
    std::atomic<int> started{0}, finished{0};
    std::vector<std::thread> threads;
    ~attack_threads() {
      stop = true;
      for (auto& t : threads)
        t.join();
    }
  } running;
  for (int i = 0; i < attackers; ++i)
    running.threads.emplace_back([&] {
      ++running.started;
      for (int k = 0; k < per_attacker && !running.stop; ++k)
        attack();
      ++running.finished;
    });
  while (running.started < attackers)  // every attacker is sending
    std::this_thread::yield();
  for (int round = 0; round < 3 && (round == 0 || running.finished < attackers); ++round) {
    const double health = seconds_of([&] { CHECK(http(s.port(), "GET", "/health").status == 200); });
    CHECK_MESSAGE(health < 1.0, "/health took " << health << " s during the attack");
    const double normal = seconds_of([&] {
      auto r = http(s.port(), "POST", "/v1/completions", normal_completion);
      CHECK_MESSAGE(r.status == 200, r.body);
    });
    CHECK_MESSAGE(normal < baseline + 2.0, "a normal request took " << normal << " s (alone: " << baseline << " s)");
  }
  int status = 0;
  REQUIRE_MESSAGE(::waitpid(s.pid(), &status, WNOHANG) == 0, "the server exited; log:\n" << s.log());
}

// The request is refused with a 400 whose param is `param` and whose message names `flag`, within `max_seconds`.
void check_refused(const server& s, const std::string& target, const std::string& body, const std::string& param,
                   const std::string& flag, double max_seconds = 1.0) {
  http_reply r;
  const double took = seconds_of([&] { r = http(s.port(), "POST", target, body); });
  CHECK_MESSAGE(took < max_seconds, param << " took " << took << " s");
  check_openai_error(r, 400);
  simdjson::dom::parser p;
  simdjson::dom::element e;
  REQUIRE(p.parse(r.body).get(e) == simdjson::SUCCESS);
  CHECK(std::string_view(e["error"]["param"]) == param);
  const std::string message{std::string_view(e["error"]["message"])};
  CHECK_MESSAGE(message.find(flag) != std::string::npos, message);
  CHECK(message.size() < 1000);  // the pattern is quoted near the problem, not whole
}

std::string completion_with(const std::string& field, const std::string& value) {
  return R"({"prompt":"Once upon a time","max_tokens":8,)" + quoted(field) + ":" + value + "}";
}

std::string chat_with(const std::string& field, const std::string& value) {
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,)" + quoted(field) + ":" + value + "}";
}

}  // namespace

TEST_CASE("attack: regexes nested 20,000 deep through every pattern field get 400 naming the depth limit") {
  server s;
  const long rss_before = status_kb(s.pid(), "VmRSS");
  const double baseline = normal_latency(s);
  const std::string groups = repeat("(", 20000) + "a" + repeat(")", 20000);          // 40 KB
  const std::string noncapturing = repeat("(?:", 10000) + "a" + repeat(")", 10000);  // 40 KB
  const std::string stacked = "a" + repeat("{2,3}", 2000);                           // quantifiers that cannot collapse
  const std::string in_schema = R"({"type":"string","pattern":)" + quoted(groups) + "}";
  struct attack {
    std::string target, body, param;
  };
  const std::vector<attack> attacks = {
      {"/v1/completions", completion_with("guided_regex", quoted(groups)), "guided_regex"},
      {"/v1/completions", completion_with("structured_outputs", R"({"regex":)" + quoted(noncapturing) + "}"),
       "structured_outputs.regex"},
      {"/v1/completions", completion_with("guided_regex", quoted(stacked)), "guided_regex"},
      {"/v1/chat/completions", chat_with("guided_regex", quoted(noncapturing)), "guided_regex"},
      {"/v1/completions", completion_with("guided_json", in_schema), "guided_json"},
      {"/v1/chat/completions",
       chat_with("response_format", R"({"type":"json_schema","json_schema":{"name":"n","schema":)" + in_schema + "}}"),
       "response_format.json_schema.schema"},
  };
  for (const attack& a : attacks) {
    CAPTURE(a.param);
    check_refused(s, a.target, a.body, a.param, "--max-structured-output-depth (64)");
  }
  std::atomic<std::size_t> next{0};
  check_served_during(
      s, baseline,
      [&] {
        const attack& a = attacks[next++ % attacks.size()];
        CHECK(http(s.port(), "POST", a.target, a.body).status == 400);
      },
      2, 100);
  // `a` and 100,000 stars (the issue's 100 KB) is over the size limit; under it, the stars collapse into a*: served,
  // and the output matches it.
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted("a" + std::string(100000, '*'))),
                "guided_regex", "--max-structured-output-bytes (65536)");
  auto stars =
      http(s.port(), "POST", "/v1/completions", completion_with("guided_regex", quoted("a" + std::string(60000, '*'))));
  REQUIRE_MESSAGE(stars.status == 200, stars.body);
  const std::string text = json_string(stars.body, {"choices", "#", "text"});
  CHECK(text.find_first_not_of('a') == std::string::npos);
  const long peak = status_kb(s.pid(), "VmHWM");
  MESSAGE("VmRSS before " << rss_before << " kB, VmHWM after " << peak << " kB");
  CHECK(peak - rss_before < memory_growth_bound_kb);
}

TEST_CASE("attack: two (.{0,100}){0,100} regexes at once are refused within a second, the server stays responsive") {
  server s;
  const long rss_before = status_kb(s.pid(), "VmRSS");
  const double baseline = normal_latency(s);
  const std::string body = completion_with("guided_regex", quoted("(.{0,100}){0,100}"));
  // Both preprocessing threads compile one at a time (they held them for 7.5 minutes before).
  std::vector<std::thread> pair;
  std::vector<http_reply> replies(2);
  std::vector<double> took(2);
  for (std::size_t i = 0; i < 2; ++i)
    pair.emplace_back(
        [&, i] { took[i] = seconds_of([&] { replies[i] = http(s.port(), "POST", "/v1/completions", body); }); });
  for (auto& t : pair)
    t.join();
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK_MESSAGE(replies[i].status == 400, replies[i].body);
    CHECK(replies[i].body.find("--structured-output-compile-budget") != std::string::npos);
    CHECK_MESSAGE(took[i] < 1.5, "took " << took[i] << " s");
  }
  check_refused(s, "/v1/chat/completions", chat_with("guided_regex", quoted("(.{0,100}){0,100}")), "guided_regex",
                "--structured-output-compile-budget", 1.5);
  // Counted repeats that multiply past the NFA limit stop while the NFA is built.
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted("(?:[a-z]{1000}){1000}")), "guided_regex",
                "8 x --max-structured-output-states");
  check_served_during(
      s, baseline, [&] { CHECK(http(s.port(), "POST", "/v1/completions", body).status == 400); }, 2, 3);
  const long peak = status_kb(s.pid(), "VmHWM");
  MESSAGE("VmRSS before " << rss_before << " kB, VmHWM after " << peak << " kB");
  CHECK(peak - rss_before < memory_growth_bound_kb);
}

TEST_CASE("attack: schemas whose pattern doubles per level are refused while the pattern is generated") {
  server s;
  const long rss_before = status_kb(s.pid(), "VmRSS");
  const double baseline = normal_latency(s);
  // 30 levels of arrays repeating their items (and of anyOf over the same $ref twice): 2^30 copies of the leaf.
  std::string arrays = R"({"$defs":{"d0":{"type":"string","maxLength":1000})";
  std::string any_ofs = arrays;
  for (int i = 1; i <= 30; ++i) {
    const std::string prev = "#/$defs/d" + std::to_string(i - 1), name = "\"d" + std::to_string(i) + "\"";
    arrays += "," + name + R"(:{"type":"array","items":{"$ref":")" + prev + R"("},"maxItems":100})";
    any_ofs += "," + name + R"(:{"anyOf":[{"$ref":")" + prev + R"("},{"$ref":")" + prev + R"("}]})";
  }
  arrays += R"(},"$ref":"#/$defs/d30"})";
  any_ofs += R"(},"$ref":"#/$defs/d30"})";
  const std::string flag = "16 x --max-structured-output-bytes";
  check_refused(s, "/v1/completions", completion_with("guided_json", arrays), "guided_json", flag);
  check_refused(s, "/v1/completions", completion_with("structured_outputs", R"({"json":)" + any_ofs + "}"),
                "structured_outputs.json", flag);
  check_refused(
      s, "/v1/chat/completions",
      chat_with("response_format", R"({"type":"json_schema","json_schema":{"name":"n","schema":)" + arrays + "}}"),
      "response_format.json_schema.schema", flag);
  // Texts over --max-structured-output-bytes are refused before they are parsed.
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted(std::string(70000, 'a'))), "guided_regex",
                "--max-structured-output-bytes (65536)");
  check_served_during(
      s, baseline,
      [&] { CHECK(http(s.port(), "POST", "/v1/completions", completion_with("guided_json", arrays)).status == 400); },
      2, 50);
  const long peak = status_kb(s.pid(), "VmHWM");
  MESSAGE("VmRSS before " << rss_before << " kB, VmHWM after " << peak << " kB");
  CHECK(peak - rss_before < memory_growth_bound_kb);
}

TEST_CASE("attack: tool_choice required over 300 tools is answered within 2 s of a normal request") {
  // It took 16 s: the compiler recomputed epsilon closures per byte with a scratch array as large as the NFA. One
  // call: compiled (about 0.1 s) and served. Parallel calls copy the 300-tool alternation three times: refused at
  // once by the state limit. --max-tools is raised to 300: its default (128) refuses the list before any compile
  // (server_attack_requests_test), and what is tested here is the compile itself.
  server s{{"--max-tools", "300"}};
  const long rss_before = status_kb(s.pid(), "VmRSS");
  const double baseline = normal_latency(s);
  std::string tools = "[";
  for (int i = 0; i < 300; ++i)
    tools +=
        std::string{i ? "," : ""} + R"({"type":"function","function":{"name":"tool_)" + std::to_string(i) +
        R"(","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}})";
  tools += "]";
  const std::string head = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":64,"temperature":0,"tools":)";
  const std::string body = head + tools + R"(,"tool_choice":"required","parallel_tool_calls":false})";
  http_reply r;
  const double took = seconds_of([&] { r = http(s.port(), "POST", "/v1/chat/completions", body); });
  MESSAGE("300 tools: " << took << " s (a normal request alone: " << baseline << " s)");
  CHECK_MESSAGE(r.status == 200, r.body);
  CHECK(took < baseline + 2.0);
  check_refused(s, "/v1/chat/completions", head + tools + R"(,"tool_choice":"required"})", "tool_choice",
                "--max-structured-output-states (50000)");
  check_served_during(
      s, baseline, [&] { CHECK(http(s.port(), "POST", "/v1/chat/completions", body).status == 200); }, 2, 3);
  const long peak = status_kb(s.pid(), "VmHWM");
  MESSAGE("VmRSS before " << rss_before << " kB, VmHWM after " << peak << " kB");
  CHECK(peak - rss_before < memory_growth_bound_kb);
}

TEST_CASE("attack: the four limits are serve flags, and each refusal names the flag with the value it was given") {
  server s{{"--max-structured-output-bytes", "200", "--max-structured-output-depth", "8",
            "--max-structured-output-states", "40", "--structured-output-compile-budget", "10000"}};
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted(std::string(201, 'a'))), "guided_regex",
                "--max-structured-output-bytes (200)");
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted(repeat("(", 9) + "a" + repeat(")", 9))),
                "guided_regex", "--max-structured-output-depth (8)");
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted("[a-z]{50}")), "guided_regex",
                "--max-structured-output-states (40)");
  // 77 distinct one-byte sets: telling their bytes apart costs 256 units each.
  std::string alternatives;
  for (char c : std::string{"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#%&,:;<=>@_~'`"})
    alternatives += std::string{alternatives.empty() ? "" : "|"} + c;
  check_refused(s, "/v1/completions", completion_with("guided_regex", quoted("(?:" + alternatives + ")")),
                "guided_regex", "--structured-output-compile-budget (10000 units)");
  check_refused(s, "/v1/completions",
                completion_with("guided_json", R"({"type":"string","description":")" + std::string(300, 'x') + "\"}"),
                "guided_json", "--max-structured-output-bytes (200)");
  check_refused(s, "/v1/completions", completion_with("guided_choice", "[\"" + std::string(250, 'c') + "\"]"),
                "guided_choice", "--max-structured-output-bytes (200)");
  // Just under each: served.
  auto ok = http(s.port(), "POST", "/v1/completions",
                 completion_with("guided_regex", quoted(repeat("(", 7) + "a{1,20}" + repeat(")", 7))));
  CHECK_MESSAGE(ok.status == 200, ok.body);
}
