// Hugging Face repo ids on the command line, as vLLM takes them: `generate --model org/name`, `serve org/name`,
// --revision, --download-dir, --tokenizer org/name, HF_HUB_OFFLINE, and a settings file's model path, all against
// the local fake Hub of tests/hub (nothing reaches the real Hub).
#include "../hub/fake_hub.hpp"
#include "apps/serve_config_file.hpp"
#include "support/die_with_parent.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

extern char** environ;

namespace {

const std::string repo = "test-org/stories260K";
const std::string commit_main = "1111111111111111111111111111111111111111";
const std::string commit_v1 = "2222222222222222222222222222222222222222";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The fake Hub with stories260K at main, and a cache directory; both removed at the end.
struct cli_fixture {
  test::fake_hub hub;
  fs::path cache = test::make_temp_dir("hub-cli-cache");
  cli_fixture() { hub.add_commit(repo, commit_main, test::files_of_directory(test::model_dir("stories260K"))); }
  ~cli_fixture() { fs::remove_all(cache); }

  // The environment a user would set, with no token and no offline mode inherited from the test's own.
  std::string env(const std::string& extra = {}) const {
    return fmt::format(
        "env -u HF_TOKEN -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE -u HF_HOME HF_TOKEN_PATH=/nonexistent "
        "HF_ENDPOINT={} HF_HUB_CACHE={} {} ",
        hub.endpoint(), cache.string(), extra);
  }
  std::size_t cdn_gets() const {
    std::size_t n = 0;
    for (const auto& r : hub.requests())
      n += r.server == "cdn" && r.method == "GET" ? 1 : 0;
    return n;
  }
};

std::vector<int64_t> output_ids(const std::string& json) {
  simdjson::dom::parser parser;
  std::vector<int64_t> ids;
  for (auto v : parser.parse(json)["output_ids"].get_array())
    ids.push_back(int64_t(v));
  return ids;
}

const std::string greedy = " --prompt 'Once upon a time' --max-tokens 24 --temperature 0 --output json";

std::vector<int64_t> local_ids() {
  const auto r = test::run_command(test::actorllm_binary().string() + " generate --model " +
                                   test::model_dir("stories260K").string() + greedy + " 2>&1");
  REQUIRE_MESSAGE(r.status == 0, r.out);
  return output_ids(r.out);
}

}  // namespace

TEST_CASE("generate --model org/name downloads from HF_ENDPOINT and gives the local directory's greedy ids") {
  cli_fixture f;
  const auto r = test::run_command(f.env() + test::actorllm_binary().string() + " generate --model " + repo + greedy +
                                   " 2>/dev/null");
  REQUIRE_MESSAGE(r.status == 0, r.out);
  const auto ids = output_ids(r.out);
  CHECK(ids.size() == 24);
  CHECK(ids == local_ids());
  CHECK(f.cdn_gets() == 1);
  const fs::path snapshot = f.cache / "models--test-org--stories260K/snapshots" / commit_main;
  CHECK(test::read_bytes(snapshot / "model.safetensors") ==
        test::read_bytes(test::model_dir("stories260K") / "model.safetensors"));

  // Offline, with the Hub unreachable: the cache alone, the same ids.
  f.hub.clear_requests();
  const std::string offline =
      fmt::format("env -u HF_TOKEN HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 HF_HUB_CACHE={} ", f.cache.string());
  const auto again = test::run_command(offline + test::actorllm_binary().string() + " generate --model " + repo +
                                       greedy + " 2>/dev/null");
  REQUIRE_MESSAGE(again.status == 0, again.out);
  CHECK(output_ids(again.out) == ids);
  CHECK(f.hub.requests().empty());

  // Offline with a file gone: the error names the repo, the revision, the file and the cache path.
  fs::remove(snapshot / "tokenizer.json");
  const auto missing =
      test::run_command(offline + test::actorllm_binary().string() + " generate --model " + repo + greedy + " 2>&1");
  CHECK(missing.status == 1);
  INFO(missing.out);
  CHECK(contains(missing.out, "actorllm generate: error: HF_HUB_OFFLINE=1: test-org/stories260K (revision main"));
  CHECK(contains(missing.out, "tokenizer.json missing from " + snapshot.string()));
}

TEST_CASE("--revision and --download-dir pick the commit and the cache and --tokenizer takes a repo id") {
  cli_fixture f;
  auto v1 = test::files_of_directory(test::model_dir("stories260K"));
  v1["config.json"].bytes += "\n";
  f.hub.add_commit(repo, commit_v1, v1, {"v1"});
  const fs::path download_dir = test::make_temp_dir("hub-cli-download-dir");
  const auto r = test::run_command(f.env() + test::actorllm_binary().string() + " generate --model " + repo +
                                   " --revision v1 --download-dir " + download_dir.string() + greedy + " 2>&1");
  REQUIRE_MESSAGE(r.status == 0, r.out);
  CHECK(output_ids(r.out) == local_ids());
  CHECK(test::run_command("cat " + (download_dir / "models--test-org--stories260K/refs/v1").string()).out == commit_v1);
  CHECK(fs::is_regular_file(download_dir / "models--test-org--stories260K/snapshots" / commit_v1 / "config.json"));
  CHECK_FALSE(fs::exists(f.cache / "models--test-org--stories260K"));  // HF_HUB_CACHE was not used

  // The model from a local directory, its tokenizer by repo id (tokenizer files only: nothing from the CDN).
  f.hub.clear_requests();
  const auto t = test::run_command(f.env() + test::actorllm_binary().string() + " generate --model " +
                                   test::model_dir("stories260K").string() + " --tokenizer " + repo + greedy + " 2>&1");
  REQUIRE_MESSAGE(t.status == 0, t.out);
  CHECK(output_ids(t.out) == local_ids());
  CHECK(fs::is_regular_file(f.cache / "models--test-org--stories260K/snapshots" / commit_main / "tokenizer.json"));
  CHECK_FALSE(fs::exists(f.cache / "models--test-org--stories260K/snapshots" / commit_main / "model.safetensors"));
  CHECK(f.cdn_gets() == 0);

  // --load-format dummy: no weights are downloaded.
  const auto d = test::run_command(f.env() + test::actorllm_binary().string() + " generate --model " + repo +
                                   " --load-format dummy" + greedy + " 2>&1");
  REQUIRE_MESSAGE(d.status == 0, d.out);
  CHECK(f.cdn_gets() == 0);

  // A revision the repo does not have, a repo that does not exist.
  const auto bad = test::run_command(f.env() + test::actorllm_binary().string() + " generate --model " + repo +
                                     " --revision nope --prompt-ids 1 2>&1");
  CHECK(bad.status == 1);
  CHECK(contains(bad.out, "the repository has no revision 'nope'"));
  const auto none = test::run_command(f.env() + test::actorllm_binary().string() +
                                      " generate --model nobody/nothing --prompt-ids 1 2>&1");
  CHECK(none.status == 1);
  CHECK(contains(none.out, "no repository nobody/nothing on " + f.hub.endpoint()));
  fs::remove_all(download_dir);
}

TEST_CASE("serve org/name downloads the model and serves it under the repo id") {
  cli_fixture f;
  const fs::path log = test::make_temp_dir("hub-cli-serve") / "server.log";
  std::vector<std::string> args{test::actorllm_binary().string(), "serve", repo, "--port", "0"};
  // The child's environment, built before fork (the fake Hub's thread runs in this process).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v{*e};
    if (!v.starts_with("HF_") && !v.starts_with("TRANSFORMERS_OFFLINE="))
      env.emplace_back(v);
  }
  env.push_back("HF_ENDPOINT=" + f.hub.endpoint());
  env.push_back("HF_HUB_CACHE=" + f.cache.string());
  env.push_back("HF_TOKEN_PATH=/nonexistent");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    test::die_with_parent(parent);
    std::FILE* out = std::freopen(log.c_str(), "w", stderr);
    (void)out;
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  const std::string marker = "at http://127.0.0.1:";
  uint16_t port = 0;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (port == 0) {
    if (std::chrono::steady_clock::now() > deadline || ::waitpid(pid, nullptr, WNOHANG) != 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      FAIL("the server did not get ready; log:\n" << test::read_bytes(log));
    }
    text = test::read_bytes(log);
    if (auto at = text.find(marker); at != std::string::npos && text.find('\n', at) != std::string::npos)
      port = static_cast<uint16_t>(std::stoi(text.substr(at + marker.size())));
    else
      std::this_thread::sleep_for(20ms);
  }
  INFO(text);
  CHECK(contains(text, "Downloading 5 file(s) of test-org/stories260K (revision main, commit " + commit_main));
  CHECK(contains(text, "Ready: model 'test-org/stories260K'"));

  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string req = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  CHECK(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    reply.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(contains(reply, "\"id\":\"test-org/stories260K\""));

  REQUIRE(::kill(pid, SIGTERM) == 0);
  int status = 0;
  bool exited = false;
  for (auto stop = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < stop;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  CHECK(exited);
  fs::remove_all(log.parent_path());
}

TEST_CASE("a settings file's model path may be a repo id and sets the revision and the cache") {
  const fs::path dir = test::make_temp_dir("hub-cli-config");
  fs::create_directories(dir / "local-model");
  auto o = app::parse_serve_config(R"([model]
path = "meta-llama/Llama-3.1-8B-Instruct"
tokenizer = "local-model"
revision = "v2"
tokenizer_revision = "v3"
download_dir = "hf-cache"
)",
                                   dir / "s.toml");
  CHECK(o.model == "meta-llama/Llama-3.1-8B-Instruct");  // no such directory beside the file: a repo id
  CHECK(o.tokenizer == (dir / "local-model").string());  // a directory beside the file
  CHECK(o.revision == "v2");
  CHECK(o.tokenizer_revision == "v3");
  CHECK(o.download_dir == (dir / "hf-cache").string());
  o = app::parse_serve_config("[model]\npath = \"missing/dir/model\"\n", dir / "s.toml");
  CHECK(o.model == (dir / "missing/dir/model").string());  // not a repo id: a path, as before
  o = app::parse_serve_config("[model]\npath = \"gpt2\"\n", dir / "s.toml");
  CHECK(o.model == (dir / "gpt2").string());  // a lone word in a file is a folder beside it
  fs::remove_all(dir);
}
