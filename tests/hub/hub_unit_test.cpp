// The Hub module's plain parts, with no network: repo ids, URLs, settings from the environment, the cache layout,
// which files a model needs, the download plan, and the Hub's answers and failures.
#include "hub/cache_layout.hpp"
#include "hub/download_plan.hpp"
#include "hub/file_selection.hpp"
#include "hub/hub_api.hpp"
#include "hub/hub_error.hpp"
#include "hub/hub_settings.hpp"
#include "hub/repo_id.hpp"
#include "hub/url.hpp"

#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <map>

using namespace actorllm;
using namespace actorllm::hub;
namespace fs = std::filesystem;

namespace {

const std::string commit_a = "0123456789abcdef0123456789abcdef01234567";

env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end())
      return std::nullopt;
    return it->second;
  };
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream{path, std::ios::binary} << text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hub_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("repo ids are validated as huggingface_hub does") {
  CHECK(is_repo_id("meta-llama/Llama-3.1-8B-Instruct"));
  CHECK(is_repo_id("gpt2"));
  CHECK(is_repo_id("Qwen/Qwen2.5-0.5B"));
  CHECK(is_repo_id("org_1/name.v2"));
  CHECK_FALSE(is_repo_id(""));
  CHECK_FALSE(is_repo_id("/abs/path"));
  CHECK_FALSE(is_repo_id("./model"));
  CHECK_FALSE(is_repo_id("a/b/c"));
  CHECK_FALSE(is_repo_id("org/-name"));
  CHECK_FALSE(is_repo_id("org/name-"));
  CHECK_FALSE(is_repo_id("org--x/name"));
  CHECK_FALSE(is_repo_id("org/na..me"));
  CHECK_FALSE(is_repo_id("org/name.git"));
  CHECK_FALSE(is_repo_id("org/name with space"));
  CHECK_FALSE(is_repo_id("org/" + std::string(97, 'a')));
  CHECK(repo_folder_name("meta-llama/Llama-3.1-8B-Instruct") == "models--meta-llama--Llama-3.1-8B-Instruct");
  CHECK(repo_folder_name("gpt2") == "models--gpt2");
}

TEST_CASE("revisions: commit hashes and names safe under refs/") {
  CHECK(is_commit_hash(commit_a));
  CHECK_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  CHECK_FALSE(is_commit_hash("main"));
  CHECK(is_valid_revision("main"));
  CHECK(is_valid_revision("refs/pr/1"));
  CHECK(is_valid_revision("v1.0"));
  CHECK_FALSE(is_valid_revision(""));
  CHECK_FALSE(is_valid_revision("../../etc"));
  CHECK_FALSE(is_valid_revision("/abs"));
  CHECK_FALSE(is_valid_revision("a//b"));
}

TEST_CASE("urls parse and resolve redirects [asan]") {
  const url u = url::parse("https://huggingface.co/api/models/x?y=1");
  CHECK(u.scheme == "https");
  CHECK(u.host == "huggingface.co");
  CHECK(u.port == 443);
  CHECK(u.target == "/api/models/x?y=1");
  CHECK(u.origin() == "https://huggingface.co");
  CHECK(url::parse("http://127.0.0.1:8080").target == "/");
  CHECK(url::parse("http://127.0.0.1:8080").host_header() == "127.0.0.1:8080");
  CHECK(url::parse("http://[::1]:9/x").host == "::1");
  CHECK(url::parse("http://[::1]:9/x").origin() == "http://[::1]:9");
  CHECK(url::parse("HTTP://Example.COM/x").origin() == "http://example.com");

  CHECK(u.resolve("https://cdn-lfs.hf.co/repos/ab?X-Amz=1").str() == "https://cdn-lfs.hf.co/repos/ab?X-Amz=1");
  CHECK(u.resolve("//cas.example/x").str() == "https://cas.example/x");
  CHECK(u.resolve("/api/models/renamed/revision/main").str() ==
        "https://huggingface.co/api/models/renamed/revision/main");
  CHECK(url::parse("http://h/a/b/c").resolve("d?q=://x").str() == "http://h/a/b/d?q=://x");

  CHECK(u.same_origin(url::parse("https://HuggingFace.co:443/other")));
  CHECK_FALSE(u.same_origin(url::parse("http://huggingface.co/other")));
  CHECK_FALSE(u.same_origin(url::parse("https://cdn-lfs.huggingface.co/other")));
  CHECK_FALSE(u.same_origin(url::parse("https://huggingface.co:8443/other")));

  CHECK(contains(error_of([] { url::parse("ftp://x/y"); }), "only http and https"));
  CHECK(contains(error_of([] { url::parse("huggingface.co"); }), "no scheme"));
  CHECK(contains(error_of([] { url::parse("http://user:pw@h/"); }), "HF_TOKEN"));
  CHECK(contains(error_of([] { url::parse("http://h:99999/"); }), "port"));

  CHECK(percent_encode("refs/pr/1", false) == "refs%2Fpr%2F1");
  CHECK(percent_encode("sub dir/model.safetensors", true) == "sub%20dir/model.safetensors");
}

TEST_CASE("settings follow huggingface_hub's environment variables") {
  const fs::path home = test::make_temp_dir("hub-home");
  auto s = hub_settings_from_environment({}, env_of({{"HOME", home.string()}}));
  CHECK(s.cache_dir == home / ".cache/huggingface/hub");
  CHECK(s.endpoint == "https://huggingface.co");
  CHECK(s.token.empty());
  CHECK_FALSE(s.offline);
  CHECK(s.timeout == std::chrono::seconds{10});
  CHECK(s.ca_file.empty());
  CHECK(hub_settings_from_environment({}, env_of({{"REQUESTS_CA_BUNDLE", "/ca.pem"}})).ca_file == "/ca.pem");
  CHECK(hub_settings_from_environment({}, env_of({{"CURL_CA_BUNDLE", "/curl.pem"}})).ca_file == "/curl.pem");

  CHECK(hub_settings_from_environment({}, env_of({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}})).cache_dir ==
        "/x/huggingface/hub");
  CHECK(hub_settings_from_environment({}, env_of({{"HOME", "/h"}, {"HF_HOME", "~/hf"}})).cache_dir == "/h/hf/hub");
  CHECK(hub_settings_from_environment({}, env_of({{"HF_HOME", "/hf"}, {"HF_HUB_CACHE", "/c"}})).cache_dir == "/c");
  CHECK(hub_settings_from_environment("/dl", env_of({{"HF_HUB_CACHE", "/c"}})).cache_dir == "/dl");

  s = hub_settings_from_environment({}, env_of({{"HF_ENDPOINT", "http://mirror:8080/"},
                                                {"HF_TOKEN", " hf_abc\n"},
                                                {"HF_HUB_OFFLINE", "1"},
                                                {"HF_HUB_DOWNLOAD_TIMEOUT", "2.5"}}));
  CHECK(s.endpoint == "http://mirror:8080");
  CHECK(s.token == "hf_abc");
  CHECK(s.token_source == "HF_TOKEN");
  CHECK(s.offline);
  CHECK(s.offline_source == "HF_HUB_OFFLINE=1");
  CHECK(s.timeout == std::chrono::milliseconds{2500});
  for (const char* yes : {"1", "true", "YES", "on"})
    CHECK(hub_settings_from_environment({}, env_of({{"TRANSFORMERS_OFFLINE", yes}})).offline);
  for (const char* no : {"0", "false", "no"})
    CHECK_FALSE(hub_settings_from_environment({}, env_of({{"HF_HUB_OFFLINE", no}})).offline);

  // The token `huggingface-cli login` saved, in $HF_HOME/token, or $HF_TOKEN_PATH.
  write(home / "hf" / "token", "hf_saved\n");
  s = hub_settings_from_environment({}, env_of({{"HF_HOME", (home / "hf").string()}}));
  CHECK(s.token == "hf_saved");
  CHECK(s.token_source == (home / "hf" / "token").string());
  write(home / "other-token", "hf_other");
  CHECK(hub_settings_from_environment(
            {}, env_of({{"HF_HOME", (home / "hf").string()}, {"HF_TOKEN_PATH", (home / "other-token").string()}}))
            .token == "hf_other");
  CHECK(contains(error_of([] {
                   hub_settings_from_environment({}, env_of({{"HF_HUB_DOWNLOAD_TIMEOUT", "soon"}}));
                 }),
                 "HF_HUB_DOWNLOAD_TIMEOUT"));
  fs::remove_all(home);
}

TEST_CASE("the cache layout: refs name commits and snapshot files link into blobs") {
  const fs::path root = test::make_temp_dir("hub-cache");
  const repo_cache cache{root, "org/name"};
  CHECK(cache.repo_dir() == root / "models--org--name");
  CHECK(cache.blob_path("abc") == root / "models--org--name/blobs/abc");
  CHECK(cache.incomplete_path("abc") == root / "models--org--name/blobs/abc.incomplete");
  CHECK(cache.lock_path("abc") == root / ".locks/models--org--name/abc.lock");
  CHECK(cache.snapshot_dir(commit_a) == root / "models--org--name/snapshots" / commit_a);

  CHECK_FALSE(cache.commit_of("main"));
  CHECK(cache.commit_of(commit_a) == commit_a);  // a commit names itself
  cache.write_ref("main", commit_a);
  CHECK(cache.commit_of("main") == commit_a);
  CHECK(test::run_command("cat " + cache.ref_path("main").string()).out == commit_a);  // no newline, as hf_hub
  cache.write_ref("refs/pr/1", commit_a);
  CHECK(cache.commit_of("refs/pr/1") == commit_a);
  write(cache.ref_path("broken"), "not a hash");
  CHECK_FALSE(cache.commit_of("broken"));
  CHECK_FALSE(cache.commit_of("../../x"));

  CHECK_FALSE(cache.has_file(commit_a, "config.json"));
  write(cache.blob_path("e1"), "{}");
  cache.link_file(commit_a, "config.json", "e1");
  cache.link_file(commit_a, "sub/dir/f.json", "e1");
  CHECK(cache.has_file(commit_a, "config.json"));
  CHECK(cache.has_file(commit_a, "sub/dir/f.json"));
  CHECK(fs::read_symlink(cache.snapshot_dir(commit_a) / "config.json") == fs::path{"../../blobs/e1"});
  CHECK(fs::read_symlink(cache.snapshot_dir(commit_a) / "sub/dir/f.json") == fs::path{"../../../../blobs/e1"});
  cache.link_file(commit_a, "dangling.json", "missing-blob");
  CHECK_FALSE(cache.has_file(commit_a, "dangling.json"));
  {
    file_lock lock{cache.lock_path("e1")};
    CHECK(fs::exists(cache.lock_path("e1")));
  }
  fs::remove_all(root);
}

TEST_CASE("the files of a model: config and tokenizer files then the safetensors checkpoint") {
  const std::vector<std::string> full{"config.json",
                                      "generation_config.json",
                                      "tokenizer.json",
                                      "tokenizer_config.json",
                                      "special_tokens_map.json",
                                      "chat_template.jinja",
                                      "model.safetensors",
                                      "pytorch_model.bin",
                                      "README.md",
                                      "original/consolidated.00.pth"};
  auto s = select_files("org/m", "main", full, {});
  CHECK(s.files == std::vector<std::string>{"config.json", "generation_config.json", "tokenizer.json",
                                            "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                                            "model.safetensors"});
  CHECK_FALSE(s.sharded);
  CHECK(s.notes.empty());

  s = select_files("org/m", "main", {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"},
                   {});
  CHECK(s.files == std::vector<std::string>{"config.json", "model.safetensors.index.json"});
  CHECK(s.sharded);
  CHECK(s.notes.size() == 1);  // no tokenizer.json
  CHECK(contains(s.notes[0], "no tokenizer.json"));

  // --load-format dummy: no weights; a tokenizer repo: the tokenizer files alone.
  s = select_files("org/m", "main", full, {.config = true, .weights = false, .tokenizer = true});
  CHECK(std::find(s.files.begin(), s.files.end(), "model.safetensors") == s.files.end());
  s = select_files("org/t", "v1", full, {.config = false, .weights = false, .tokenizer = true});
  CHECK(s.files == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                            "chat_template.jinja"});
  CHECK(contains(error_of([] {
                   select_files("org/t", "v1", {"tokenizer.model"}, {false, false, true});
                 }),
                 "org/t (revision v1) has no tokenizer.json"));
}

TEST_CASE("a repo with only pickled checkpoints is refused naming them") {
  const std::string e = error_of([] {
    select_files("org/old", "main", {"config.json", "tokenizer.json", "pytorch_model.bin", "training_args.pt"}, {});
  });
  CHECK(contains(e, "org/old (revision main) has no model.safetensors or model.safetensors.index.json"));
  CHECK(contains(e, "pytorch_model.bin, training_args.pt"));
  CHECK(contains(e, "never loaded here"));
  CHECK(contains(error_of([] {
                   select_files("org/x", "main", {"config.json", "consolidated.safetensors"}, {});
                 }),
                 "consolidated.safetensors"));
  CHECK(contains(error_of([] { select_files("org/x", "main", {"model.safetensors"}, {}); }), "has no config.json"));
}

TEST_CASE("index_shards lists each shard once and refuses paths [asan]") {
  CHECK(index_shards(
            R"({"metadata":{},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors","c":"m-2.safetensors"}})",
            "idx") == std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"});
  CHECK(contains(error_of([] { index_shards(R"({"weight_map":{"a":"../../etc/passwd"}})", "idx"); }),
                 "not a plain file name"));
  CHECK(contains(error_of([] { index_shards(R"({"weight_map":{"a":"sub/x.safetensors"}})", "idx"); }),
                 "not a plain file name"));
  CHECK(contains(error_of([] { index_shards(R"({"weight_map":{}})", "idx"); }), "empty"));
  CHECK(contains(error_of([] { index_shards("nope", "idx"); }), "idx: not valid JSON"));
  CHECK(contains(error_of([] { index_shards("{}", "idx"); }), "no weight_map"));
}

TEST_CASE("missing_files says what a snapshot directory lacks") {
  const fs::path dir = test::make_temp_dir("hub-snapshot");
  CHECK(missing_files(dir, {}) == std::vector<std::string>{"config.json", "tokenizer.json", "model.safetensors"});
  write(dir / "config.json", "{}");
  write(dir / "tokenizer.json", "{}");
  write(dir / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  write(dir / "s1.safetensors", "x");
  CHECK(missing_files(dir, {}) == std::vector<std::string>{"s2.safetensors"});
  write(dir / "s2.safetensors", "x");
  CHECK(missing_files(dir, {}).empty());
  write(dir / "model.safetensors.index.json", "broken");
  CHECK(missing_files(dir, {}) == std::vector<std::string>{"model.safetensors.index.json"});
  CHECK(missing_files(dir, {.config = true, .weights = false, .tokenizer = true}).empty());
  fs::remove(dir / "tokenizer.json");
  CHECK(missing_files(dir, {.config = false, .weights = false, .tokenizer = true}) ==
        std::vector<std::string>{"tokenizer.json"});
  fs::remove_all(dir);
  CHECK(is_safe_repo_file("a/b.json"));
  CHECK_FALSE(is_safe_repo_file("a/../b"));
  CHECK_FALSE(is_safe_repo_file("/etc/passwd"));
  CHECK_FALSE(is_safe_repo_file("a\\b"));
}

TEST_CASE("a HEAD answer gives the blob name and size and checksum and where the bytes are") {
  const std::string sha = std::string(64, 'a');
  std::map<std::string, std::string> lfs{{"x-linked-etag", "\"" + sha + "\""},
                                         {"x-linked-size", "1044992"},
                                         {"etag", "W/\"other\""},
                                         {"location", "https://cdn/x"},
                                         {"content-length", "1"}};
  const auto lookup = [](const std::map<std::string, std::string>& h) {
    return [&h](std::string_view name) -> std::optional<std::string> {
      auto it = h.find(std::string{name});
      return it == h.end() ? std::nullopt : std::optional<std::string>{it->second};
    };
  };
  remote_file f = remote_file_from_head("model.safetensors", "https://hub/r", 302, lookup(lfs));
  CHECK(f.etag == sha);
  CHECK(f.sha256 == sha);
  CHECK(f.size == 1044992u);
  CHECK(f.download_url == "https://cdn/x");

  std::map<std::string, std::string> plain{{"etag", "\"0123456789abcdef0123456789abcdef01234567\""},
                                           {"content-length", "627"}};
  f = remote_file_from_head("config.json", "https://hub/r", 200, lookup(plain));
  CHECK(f.etag == "0123456789abcdef0123456789abcdef01234567");
  CHECK(f.sha256.empty());  // a git blob id, not a sha256: nothing to check against
  CHECK(f.size == 627u);
  CHECK(f.download_url == "https://hub/r");

  std::map<std::string, std::string> none{{"content-length", "1"}};
  CHECK(contains(error_of([&] { remote_file_from_head("config.json", "https://hub/r", 200, lookup(none)); }),
                 "no ETag for config.json"));
  std::map<std::string, std::string> evil{{"etag", "\"../../x\""}};
  CHECK(contains(error_of([&] { remote_file_from_head("config.json", "https://hub/r", 200, lookup(evil)); }),
                 "cannot name a cache file"));
  CHECK(normalize_etag("W/\"abc\"") == "abc");
}

TEST_CASE("the download plan links present blobs and continues partial ones") {
  const auto file = [](std::string name, std::optional<uint64_t> size) {
    remote_file f;
    f.name = name;
    f.etag = "e" + name;
    f.size = size;
    return f;
  };
  const auto state = [](bool present, uint64_t partial) {
    cache_state c;
    c.blob_present = present;
    c.partial_bytes = partial;
    return c;
  };
  download_plan plan;
  plan.add(file("a", 100), state(true, 0));
  plan.add(file("b", 1000), state(false, 400));
  plan.add(file("c", 10), state(false, 10));  // as long as the file: not trusted
  plan.add(file("d", std::nullopt), state(false, 0));
  remote_file same_blob = file("b2", 1000);
  same_blob.etag = "eb";
  plan.add(same_blob, state(false, 400));
  REQUIRE(plan.files().size() == 5);
  CHECK_FALSE(plan.files()[4].download);  // "b" fetches it
  CHECK_FALSE(plan.files()[0].download);
  CHECK(plan.files()[1].download);
  CHECK(plan.files()[1].resume_from == 400);
  CHECK(plan.files()[2].resume_from == 0);
  CHECK(plan.downloads() == 3);
  CHECK(plan.bytes_to_fetch() == 600 + 10);
}

TEST_CASE("the Hub's answers: model info and what each failure means [asan]") {
  const repo_info info = parse_repo_info(
      R"({"id":"o/m","sha":")" + commit_a + R"(","siblings":[{"rfilename":"config.json"},{"rfilename":"a/b.bin"}]})",
      "u");
  CHECK(info.sha == commit_a);
  CHECK(info.siblings == std::vector<std::string>{"config.json", "a/b.bin"});
  CHECK(contains(error_of([] { parse_repo_info("{}", "u"); }), "no commit hash"));
  CHECK(contains(error_of([] { parse_repo_info(R"({"sha":")" + commit_a + R"("})", "u"); }), "no file list"));
  CHECK(contains(
      error_of([] { parse_repo_info(R"({"sha":")" + commit_a + R"(","siblings":[{"rfilename":"../x"}]})", "u"); }),
      "reaches outside"));

  const failure_context at{.repo = "meta-llama/Llama-3.1-8B-Instruct",
                           .revision = "main",
                           .file = "",
                           .url = "https://huggingface.co/api/models/x",
                           .endpoint = "https://huggingface.co",
                           .token_source = ""};
  std::string m = describe_http_failure(401, std::nullopt, std::nullopt, at);
  CHECK(contains(m, "meta-llama/Llama-3.1-8B-Instruct at revision main"));
  CHECK(contains(m, "401"));
  CHECK(contains(m, "set HF_TOKEN"));
  failure_context with_token = at;
  with_token.token_source = "HF_TOKEN";
  CHECK(contains(describe_http_failure(401, std::nullopt, std::nullopt, with_token), "the token from HF_TOKEN"));
  m = describe_http_failure(403, "GatedRepo", "Access restricted", at);
  CHECK(contains(m, "gated model"));
  CHECK(contains(m, "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"));
  CHECK(contains(m, "HF_TOKEN"));
  CHECK(contains(m, "Access restricted"));
  m = describe_http_failure(401, "GatedRepo", std::nullopt, at);  // the Hub's answer to a gated file, no token
  CHECK(contains(m, "HTTP 401"));
  CHECK(contains(m, "gated model"));
  CHECK(contains(m, "no token was sent"));
  CHECK(contains(describe_http_failure(404, "RevisionNotFound", std::nullopt, at), "no revision 'main'"));
  failure_context file_at = at;
  file_at.file = "model.safetensors";
  CHECK(contains(describe_http_failure(404, "EntryNotFound", std::nullopt, file_at), "has no file model.safetensors"));
  CHECK(contains(describe_http_failure(404, std::nullopt, std::nullopt, file_at),
                 "no such repository, revision or file"));
  CHECK(contains(describe_http_failure(500, std::nullopt, "boom", at), "HTTP 500"));
}

TEST_CASE("a repository the Hub does not know is named as such") {
  const failure_context at{.repo = "nobody/nothing",
                           .revision = "main",
                           .file = "",
                           .url = "https://huggingface.co/api/models/nobody/nothing/revision/main",
                           .endpoint = "https://huggingface.co",
                           .token_source = ""};
  const std::string m = describe_http_failure(401, "RepoNotFound", "Repository not found", at);
  CHECK(contains(m, "no repository nobody/nothing on https://huggingface.co"));
  CHECK(contains(m, "private one: set HF_TOKEN"));
}
