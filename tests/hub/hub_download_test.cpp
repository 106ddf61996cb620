// Resolving Hub names against a local fake Hub (fake_hub.hpp) and a temporary cache: downloads through the LFS
// redirect, the cache alone with no network, checksums, resumed transfers, where the token goes, offline mode and
// the errors a user sees.
#include "fake_hub.hpp"

#include "hub/hub_error.hpp"
#include "hub/model_resolver.hpp"
#include "hub/repo_id.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <fmt/format.h>

#include <cstring>
#include <fstream>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

const std::string repo = "test-org/stories260K";
const std::string commit_main = "1111111111111111111111111111111111111111";
const std::string commit_v1 = "2222222222222222222222222222222222222222";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hub::hub_error& e) {
    return e.what();
  }
  return "(no error)";
}

// stories260K's files as a commit, with a pickled checkpoint beside them that must never be fetched.
std::map<std::string, test::fake_hub_file> stories_files() {
  auto files = test::files_of_directory(test::model_dir("stories260K"));
  files["pytorch_model.bin"] = {"pickled weights, never to be fetched", true};
  return files;
}

// A fake Hub serving stories260K at commit_main, and an empty cache directory; both go at the end of the test.
struct hub_fixture {
  test::fake_hub hub;
  fs::path cache = test::make_temp_dir("hub-cache");
  hub::hub_settings settings;
  std::string model_sha = test::sha256_hex(test::read_bytes(test::model_dir("stories260K") / "model.safetensors"));

  hub_fixture() {
    hub.add_commit(repo, commit_main, stories_files());
    settings.cache_dir = cache;
    settings.endpoint = hub.endpoint();
    settings.timeout = std::chrono::seconds{5};
  }
  ~hub_fixture() { fs::remove_all(cache); }

  fs::path resolve(const std::string& revision = "main", hub::wanted_files wanted = {}) const {
    return hub::resolve_snapshot({.repo = repo, .revision = revision, .wanted = wanted}, settings);
  }
  fs::path repo_dir() const { return cache / "models--test-org--stories260K"; }

  std::vector<test::fake_hub_request> requests_to(const std::string& server) const {
    std::vector<test::fake_hub_request> out;
    for (const auto& r : hub.requests())
      if (r.server == server)
        out.push_back(r);
    return out;
  }
};

// Every file of a snapshot is byte-identical to the same file of stories260K.
void check_identical(const fs::path& snapshot, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    INFO(name);
    CHECK(test::read_bytes(snapshot / name) == test::read_bytes(test::model_dir("stories260K") / name));
  }
}

const std::vector<std::string> needed{"config.json", "generation_config.json", "tokenizer.json",
                                      "tokenizer_config.json", "model.safetensors"};

}  // namespace

TEST_CASE("an empty cache downloads the model through the LFS redirect into huggingface_hub's layout") {
  hub_fixture f;
  const fs::path dir = f.resolve();
  CHECK(dir == f.repo_dir() / "snapshots" / commit_main);
  check_identical(dir, needed);
  CHECK(test::run_command("cat " + (f.repo_dir() / "refs/main").string()).out == commit_main);
  // Each file is a relative symlink into blobs/, the LFS file's blob named by its sha256.
  CHECK(fs::is_symlink(dir / "config.json"));
  CHECK(fs::read_symlink(dir / "model.safetensors") == fs::path{"../../blobs/" + f.model_sha});
  CHECK(fs::is_regular_file(f.repo_dir() / "blobs" / f.model_sha));
  for (const auto& e : fs::directory_iterator{f.repo_dir() / "blobs"})
    CHECK_FALSE(e.path().extension() == ".incomplete");
  // Only what the engine reads: never the pickled checkpoint, nor the other files of the repo.
  CHECK_FALSE(fs::exists(dir / "pytorch_model.bin"));
  CHECK_FALSE(fs::exists(dir / "SOURCE.md"));
  bool model_from_cdn = false;
  for (const auto& r : f.hub.requests()) {
    INFO(r.server << " " << r.method << " " << r.target);
    CHECK(r.target.find("pytorch_model.bin") == std::string::npos);
    if (r.server == "cdn" && r.method == "GET" && contains(r.target, f.model_sha))
      model_from_cdn = true;
  }
  CHECK(model_from_cdn);
  CHECK(f.requests_to("hub").front().target == "/api/models/" + repo + "/revision/main");
}

TEST_CASE("a complete cached snapshot resolves with no request whether online or offline or with the Hub unreachable") {
  hub_fixture f;
  const fs::path first = f.resolve();
  f.hub.clear_requests();
  CHECK(f.resolve() == first);
  CHECK(f.hub.requests().empty());

  hub::hub_settings offline = f.settings;
  offline.offline = true;
  offline.offline_source = "HF_HUB_OFFLINE=1";
  CHECK(hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, offline) == first);
  hub::hub_settings unreachable = f.settings;
  unreachable.endpoint = "http://127.0.0.1:1";
  CHECK(hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, unreachable) == first);
  CHECK(hub::resolve_snapshot({.repo = repo, .revision = commit_main, .wanted = {}}, unreachable) ==
        first);  // by commit
  CHECK(f.hub.requests().empty());
}

TEST_CASE("a cache filled as huggingface_hub fills it resolves offline") {
  // Built by hand the way huggingface_hub writes it: blobs named by etag, relative symlinks, refs/main.
  const fs::path cache = test::make_temp_dir("hub-prefilled");
  const fs::path repo_dir = cache / "models--test-org--stories260K";
  const fs::path snapshot = repo_dir / "snapshots" / commit_main;
  fs::create_directories(repo_dir / "blobs");
  fs::create_directories(snapshot);
  fs::create_directories(repo_dir / "refs");
  std::ofstream{repo_dir / "refs/main"} << commit_main;
  int n = 0;
  for (const std::string& name : needed) {
    const std::string etag = name == "model.safetensors"
                                 ? test::sha256_hex(test::read_bytes(test::model_dir("stories260K") / name))
                                 : fmt::format("{:040x}", ++n);
    fs::copy_file(test::model_dir("stories260K") / name, repo_dir / "blobs" / etag);
    fs::create_symlink(fs::path{"../../blobs"} / etag, snapshot / name);
  }
  hub::hub_settings s;
  s.cache_dir = cache;
  s.endpoint = "http://127.0.0.1:1";
  s.offline = true;
  s.offline_source = "HF_HUB_OFFLINE=1";
  CHECK(hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, s) == snapshot);
  s.offline = false;  // online too: a complete snapshot needs no network (the endpoint is unreachable)
  CHECK(hub::resolve_model_path(repo, "", {}, s) == snapshot);
  check_identical(snapshot, needed);
  fs::remove_all(cache);
}

TEST_CASE("a corrupted file is refused by its checksum and leaves no blob [asan]") {
  hub_fixture f;
  f.hub.corrupt(f.model_sha);
  const std::string e = error_of([&] { f.resolve(); });
  CHECK(contains(e, "model.safetensors of test-org/stories260K (revision main)"));
  CHECK(contains(e, "refused"));
  CHECK(contains(e, "the Hub's checksum is " + f.model_sha));
  CHECK(contains(e, "sha256 "));
  CHECK_FALSE(fs::exists(f.repo_dir() / "blobs" / f.model_sha));
  CHECK_FALSE(fs::exists(f.repo_dir() / "blobs" / (f.model_sha + ".incomplete")));
  CHECK_FALSE(fs::exists(f.repo_dir() / "snapshots" / commit_main / "model.safetensors"));
  CHECK_FALSE(fs::exists(f.repo_dir() / "refs/main"));  // the ref is written once the snapshot is whole
}

TEST_CASE("an interrupted download continues with a Range request [asan]") {
  hub_fixture f;
  f.hub.cut_after(f.model_sha, 300000);
  const fs::path dir = f.resolve();
  check_identical(dir, {"model.safetensors"});
  std::vector<std::string> ranges;
  for (const auto& r : f.requests_to("cdn"))
    ranges.push_back(r.range);
  CHECK(ranges == std::vector<std::string>{"", "bytes=300000-"});
}

TEST_CASE("a partial blob left by an earlier run is continued from where it stopped") {
  hub_fixture f;
  const std::string bytes = test::read_bytes(test::model_dir("stories260K") / "model.safetensors");
  fs::create_directories(f.repo_dir() / "blobs");
  std::ofstream{f.repo_dir() / "blobs" / (f.model_sha + ".incomplete"), std::ios::binary} << bytes.substr(0, 123456);
  const fs::path dir = f.resolve();
  check_identical(dir, {"model.safetensors"});
  const auto cdn = f.requests_to("cdn");
  REQUIRE(cdn.size() == 1);
  CHECK(cdn[0].range == "bytes=123456-");

  // Kept bytes that are not the file's: the checksum refuses the result and the partial blob goes.
  hub_fixture g;
  fs::create_directories(g.repo_dir() / "blobs");
  std::ofstream{g.repo_dir() / "blobs" / (g.model_sha + ".incomplete"), std::ios::binary} << std::string(1000, 'x');
  CHECK(contains(error_of([&] { g.resolve(); }), "refused"));
  CHECK_FALSE(fs::exists(g.repo_dir() / "blobs" / (g.model_sha + ".incomplete")));
  CHECK(g.resolve() == g.repo_dir() / "snapshots" / commit_main);  // and the next run starts afresh
}

TEST_CASE("HF_TOKEN goes to the Hub host and never to the redirect target") {
  hub_fixture f;
  f.hub.gate(repo, "hf_secret");
  f.settings.token = "hf_secret";
  f.settings.token_source = "HF_TOKEN";
  check_identical(f.resolve(), needed);
  const auto hub_requests = f.requests_to("hub");
  const auto cdn_requests = f.requests_to("cdn");
  REQUIRE_FALSE(hub_requests.empty());
  REQUIRE_FALSE(cdn_requests.empty());
  for (const auto& r : hub_requests)
    CHECK(r.authorization == "Bearer hf_secret");
  for (const auto& r : cdn_requests)
    CHECK(r.authorization.empty());
}

TEST_CASE("a gated repo without a token or with one that has no access says what to do") {
  hub_fixture f;
  f.hub.gate(repo, "hf_secret");
  std::string e = error_of([&] { f.resolve(); });
  CHECK(contains(e, "test-org/stories260K at revision main"));
  CHECK(contains(e, "401"));
  CHECK(contains(e, "set HF_TOKEN"));
  f.settings.token = "hf_wrong";
  f.settings.token_source = "HF_TOKEN";
  e = error_of([&] { f.resolve(); });
  CHECK(contains(e, "403"));
  CHECK(contains(e, "gated model"));
  CHECK(contains(e, f.hub.endpoint() + "/" + repo));
  CHECK(contains(e, "the token from HF_TOKEN has none"));
}

TEST_CASE("missing repos and revisions are named") {
  hub_fixture f;
  std::string e = error_of(
      [&] { hub::resolve_snapshot({.repo = "nobody/nothing", .revision = "main", .wanted = {}}, f.settings); });
  CHECK(contains(e, "no repository nobody/nothing on " + f.hub.endpoint()));
  e = error_of([&] { f.resolve("no-such-branch"); });
  CHECK(contains(e, "no revision 'no-such-branch'"));
  CHECK(contains(e, "test-org/stories260K"));
  e = error_of([&] { f.resolve("../../etc"); });
  CHECK(contains(e, "not a usable revision"));
  hub::hub_settings unreachable = f.settings;
  unreachable.endpoint = "http://127.0.0.1:1";
  e = error_of([&] { hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, unreachable); });
  CHECK(contains(e, "cannot connect to http://127.0.0.1:1"));
  CHECK(contains(e, "HF_HUB_OFFLINE=1"));
}

TEST_CASE("offline with a missing file names the repo and revision and file and the cache path") {
  hub_fixture f;
  f.settings.offline = true;
  f.settings.offline_source = "HF_HUB_OFFLINE=1";
  std::string e = error_of([&] { f.resolve(); });
  CHECK(contains(e, "HF_HUB_OFFLINE=1"));
  CHECK(contains(e, "test-org/stories260K (revision main) is not in the cache"));
  CHECK(contains(e, (f.repo_dir() / "refs/main").string()));

  f.settings.offline = false;
  f.resolve();
  fs::remove(f.repo_dir() / "snapshots" / commit_main / "model.safetensors");
  f.settings.offline = true;
  f.hub.clear_requests();
  e = error_of([&] { f.resolve(); });
  CHECK(contains(e, "test-org/stories260K (revision main, commit " + commit_main + ")"));
  CHECK(contains(e, "model.safetensors missing from " + (f.repo_dir() / "snapshots" / commit_main).string()));
  CHECK(f.hub.requests().empty());
  // --load-format dummy needs no weights: the same snapshot is enough.
  CHECK(f.resolve("main", {.config = true, .weights = false, .tokenizer = true}) ==
        f.repo_dir() / "snapshots" / commit_main);
}

TEST_CASE("--revision picks a branch or tag or commit and each has its snapshot") {
  hub_fixture f;
  auto v1 = stories_files();
  v1["config.json"].bytes += "\n";  // another commit with another config.json
  f.hub.add_commit(repo, commit_v1, v1, {"v1"});
  const fs::path main_dir = f.resolve("main");
  const fs::path v1_dir = f.resolve("v1");
  CHECK(v1_dir == f.repo_dir() / "snapshots" / commit_v1);
  CHECK(test::read_bytes(v1_dir / "config.json") == v1["config.json"].bytes);
  CHECK(test::read_bytes(main_dir / "config.json") != v1["config.json"].bytes);
  CHECK(test::run_command("cat " + (f.repo_dir() / "refs/v1").string()).out == commit_v1);
  // The weights are one blob for both commits: the second snapshot only linked it.
  std::size_t model_downloads = 0;
  for (const auto& r : f.requests_to("cdn"))
    model_downloads += r.method == "GET" ? 1 : 0;
  CHECK(model_downloads == 1);
  CHECK(f.resolve(commit_v1) == v1_dir);
}

TEST_CASE("a sharded checkpoint downloads its index and every shard it names") {
  hub_fixture f;
  // Two shards, each a whole copy of stories260K's file, the index putting half the tensors in each (the loader
  // only asks that each tensor be in its shard).
  const std::string bytes = test::read_bytes(test::model_dir("stories260K") / "model.safetensors");
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  simdjson::dom::parser parser;
  simdjson::dom::object header = parser.parse(bytes.substr(8, header_size)).get_object();
  std::string weight_map;
  int i = 0;
  for (auto [name, info] : header) {
    if (name == "__metadata__")
      continue;
    weight_map += fmt::format("{}\"{}\":\"model-0000{}-of-00002.safetensors\"", weight_map.empty() ? "" : ",", name,
                              1 + (i++ % 2));
  }
  auto files = stories_files();
  files.erase("model.safetensors");
  files["model.safetensors.index.json"] = {fmt::format(R"({{"metadata":{{}},"weight_map":{{{}}}}})", weight_map),
                                           false};
  files["model-00001-of-00002.safetensors"] = {bytes, true};
  files["model-00002-of-00002.safetensors"] = {bytes, true};
  files["model-00003-of-00003.safetensors"] = {"an orphan shard the index does not name", true};
  f.hub.add_commit("test-org/sharded", commit_main, files);
  const fs::path dir =
      hub::resolve_snapshot({.repo = "test-org/sharded", .revision = "main", .wanted = {}}, f.settings);
  CHECK(test::read_bytes(dir / "model-00001-of-00002.safetensors") == bytes);
  CHECK(test::read_bytes(dir / "model-00002-of-00002.safetensors") == bytes);
  CHECK(fs::is_regular_file(dir / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  std::size_t transfers = 0;
  for (const auto& r : f.requests_to("cdn"))
    transfers += r.method == "GET" ? 1 : 0;
  CHECK(transfers == 1);  // one blob for both shards
}

TEST_CASE("a tokenizer repo downloads the tokenizer files alone") {
  hub_fixture f;
  const fs::path dir = f.resolve("main", {.config = false, .weights = false, .tokenizer = true});
  CHECK(fs::is_regular_file(dir / "tokenizer.json"));
  CHECK(fs::is_regular_file(dir / "tokenizer_config.json"));
  CHECK_FALSE(fs::exists(dir / "config.json"));
  CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  CHECK(f.requests_to("cdn").empty());
}

TEST_CASE("a model repo without tokenizer.json resolves and is remembered as such for offline starts") {
  hub_fixture f;
  auto files = stories_files();
  files.erase("tokenizer.json");
  f.hub.add_commit("test-org/no-tokenizer", commit_main, files);
  const fs::path dir =
      hub::resolve_snapshot({.repo = "test-org/no-tokenizer", .revision = "main", .wanted = {}}, f.settings);
  CHECK(fs::is_regular_file(dir / "config.json"));
  CHECK(fs::exists(f.cache / "models--test-org--no-tokenizer/.no_exist" / commit_main / "tokenizer.json"));
  f.settings.offline = true;
  CHECK(hub::resolve_snapshot({.repo = "test-org/no-tokenizer", .revision = "main", .wanted = {}}, f.settings) == dir);
}

TEST_CASE("resolve_model_path takes a directory as is and refuses a name that is neither") {
  hub::hub_settings s;
  s.cache_dir = "/nonexistent-cache";
  s.offline = true;
  const std::string local = test::model_dir("stories260K").string();
  CHECK(hub::resolve_model_path(local, "", {}, s) == fs::path{local});
  CHECK(contains(error_of([&] { hub::resolve_model_path("/nonexistent-model", "", {}, s); }),
                 "/nonexistent-model: no such directory, and not a Hugging Face repo id"));
  CHECK(contains(error_of([&] { hub::resolve_model_path(local + "/config.json", "", {}, s); }), "is a file"));
}

namespace {

// A CA, and certificates it signed for 127.0.0.1 and for another name, made with the openssl command.
struct https_pki {
  fs::path dir = test::make_temp_dir("hub-pki");
  std::string ca = (dir / "ca.pem").string();
  std::string for_address = (dir / "server.pem").string();
  std::string for_address_key = (dir / "server.key").string();
  std::string for_other_name = (dir / "other.pem").string();
  std::string for_other_name_key = (dir / "other.key").string();

  https_pki() {
    run(
        fmt::format("openssl req -x509 -newkey rsa:2048 -nodes -keyout {0}/ca.key -out {1} -days 2 -subj '/CN=hub "
                    "test CA'",
                    dir.string(), ca));
    sign(for_address, for_address_key, "IP:127.0.0.1");
    sign(for_other_name, for_other_name_key, "DNS:hub.example");
  }
  ~https_pki() { fs::remove_all(dir); }

  void sign(const std::string& pem, const std::string& key, const std::string& alt_name) const {
    const std::string d = dir.string();
    std::ofstream{dir / "ext.cnf"} << "subjectAltName=" << alt_name << "\n";
    run(fmt::format("openssl req -newkey rsa:2048 -nodes -keyout {} -out {}/req.csr -subj '/CN=hub'", key, d));
    run(
        fmt::format("openssl x509 -req -in {0}/req.csr -CA {1} -CAkey {0}/ca.key -CAcreateserial -out {2} -days 2 "
                    "-extfile {0}/ext.cnf",
                    d, ca, pem));
  }
  static void run(const std::string& command) {
    const auto r = test::run_command(command + " 2>&1");
    REQUIRE_MESSAGE(r.status == 0, command << ": " << r.out);
  }
};

}  // namespace

TEST_CASE("https: a certificate from a trusted CA for the address downloads and any other is refused [asan]") {
  https_pki pki;
  {
    test::fake_hub hub{test::fake_hub_tls{pki.for_address, pki.for_address_key}};
    hub.add_commit(repo, commit_main, stories_files());
    REQUIRE(hub.endpoint().starts_with("https://127.0.0.1:"));
    const fs::path cache = test::make_temp_dir("hub-https-cache");
    hub::hub_settings s;
    s.cache_dir = cache;
    s.endpoint = hub.endpoint();
    s.timeout = std::chrono::seconds{5};
    // The system's store does not know the test CA.
    std::string e = error_of([&] { hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, s); });
    CHECK(contains(e, "TLS with " + hub.endpoint() + ": the certificate is not trusted"));
    s.ca_file = pki.ca;
    check_identical(hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, s), needed);
    fs::remove_all(cache);
  }
  {
    // Signed by the trusted CA, but for another host name.
    test::fake_hub hub{test::fake_hub_tls{pki.for_other_name, pki.for_other_name_key}};
    hub.add_commit(repo, commit_main, stories_files());
    const fs::path cache = test::make_temp_dir("hub-https-cache");
    hub::hub_settings s;
    s.cache_dir = cache;
    s.endpoint = hub.endpoint();
    s.timeout = std::chrono::seconds{5};
    s.ca_file = pki.ca;
    const std::string e = error_of([&] { hub::resolve_snapshot({.repo = repo, .revision = "main", .wanted = {}}, s); });
    CHECK(contains(e, "the certificate is not trusted (IP address mismatch)"));
    fs::remove_all(cache);
  }
}
