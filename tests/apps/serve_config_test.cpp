// `actorllm serve` settings: the TOML reader (apps/serve_config_file.hpp), name suggestions
// (apps/nearest_name.hpp), and the real binary's flags, --config and start-up.
#include "apps/engine_flags.hpp"
#include "apps/nearest_name.hpp"
#include "apps/serve_config_file.hpp"

#include "support/die_with_parent.hpp"
#include "support/test_paths.hpp"

#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const fs::path configs_dir = fs::path{ACTORLLM_SOURCE_DIR} / "configs";

/// The message of the config_file_error that parsing `text` (named `name`, in a fresh directory) throws.
std::string config_error(const std::string& text, const std::string& name = "cluster.toml") {
  const fs::path file = test::make_temp_dir("serve-config") / name;
  std::ofstream{file} << text;
  try {
    app::read_serve_config_file(file);
  } catch (const app::config_file_error& e) {
    return e.what();
  }
  FAIL("no error for:\n" << text);
  return {};
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path file = test::make_temp_dir("serve-config") / name;
  std::ofstream{file} << text;
  return file;
}

std::string read_text(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("edit_distance counts insertions, deletions, substitutions and neighbour swaps") {
  CHECK(app::edit_distance("", "") == 0);
  CHECK(app::edit_distance("abc", "") == 3);
  CHECK(app::edit_distance("paralel", "parallel") == 1);
  CHECK(app::edit_distance("tesnor", "tensor") == 1);
  CHECK(app::edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("nearest_name suggests a close name and nothing for an unrelated one") {
  const std::vector<std::string> flags{"--tensor-parallel-size", "--pipeline-parallel-size", "--port", "--host"};
  CHECK(app::nearest_name("--tensor-paralel-size", flags) == "--tensor-parallel-size");
  CHECK(app::nearest_name("--pipline-parallel-size", flags) == "--pipeline-parallel-size");
  CHECK(app::nearest_name("--prot", flags) == "--port");
  CHECK_FALSE(app::nearest_name("--frobnicate", flags).has_value());
  CHECK_FALSE(app::nearest_name("x", {}).has_value());
}

TEST_CASE("every configs/*.toml parses") {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(configs_dir)) {
    if (entry.path().extension() != ".toml")
      continue;
    INFO(entry.path());
    CHECK_NOTHROW(app::read_serve_config_file(entry.path()));
    ++n;
  }
  CHECK(n >= 3);

  auto stories = app::read_serve_config_file(configs_dir / "serve-stories260k.toml");
  CHECK(stories.engine.tensor_parallel_size == 2);
  CHECK(stories.engine.pipeline_parallel_size == 1);
  // The relative model path is taken relative to the file: configs/../../shared/models/stories260K.
  CHECK(fs::path{stories.model} == (configs_dir / "../../shared/models/stories260K").lexically_normal());
  CHECK(stories.config_file == (configs_dir / "serve-stories260k.toml").string());

  auto cluster = app::read_serve_config_file(configs_dir / "cluster.toml");
  CHECK(cluster.engine.tensor_parallel_size == 2);
  CHECK(cluster.engine.pipeline_parallel_size == 2);
  CHECK(cluster.engine.pp_layer_partition == "3,2");
  CHECK(cluster.served_model_names == std::vector<std::string>{"stories260k", "default"});

  auto llama = app::read_serve_config_file(configs_dir / "llama-3.1-8b-tp8.toml");
  CHECK(llama.engine.tensor_parallel_size == 8);
  CHECK(llama.model == "/models/Llama-3.1-8B-Instruct");
  CHECK(llama.engine.gpu_memory_utilization == doctest::Approx(0.9));
  CHECK(llama.gpu_memory_utilization_set);
  CHECK(llama.shutdown_timeout == doctest::Approx(30.0));  // an integer where a float is expected is fine
  CHECK(llama.allowed_origins == std::vector<std::string>{"https://chat.example.com"});
}

TEST_CASE("a settings file sets every section's keys, and dashes work like underscores") {
  auto o = app::parse_serve_config(R"(
[model]
path = "/abs/model"
tokenizer = "tok"
served-model-name = "m"
dtype = "bfloat16"
load_format = "dummy"
max_model_len = 256
seed = 7
chat_template = "{{ messages }}"
generation_config = "vllm"
enforce_eager = true
[lora]
enable_lora = true
lora_modules = ["sql=/adapters/sql", "chat=/adapters/chat"]
max_loras = 3
max_lora_rank = 64
max_cpu_loras = 5
[parallel]
tensor-parallel-size = 4
pipeline_parallel_size = 3
data-parallel-size = 4
data_parallel_size_local = 2
data_parallel_rank = 3
pp_layer_partition = "2,2,1"
distributed_executor_backend = "mp"
num_threads = 3
max_worker_restarts = 5
device = "cpu"
enable_expert_parallel = true
eplb_config = '{"window_size": 50, "step_interval": 200}'
decode-context-parallel-size = 2
dcp_kv_cache_interleave_size = 4
[scheduler]
max_num_seqs = 8
max_num_batched_tokens = 99
max_queued_requests = -1
scheduling_policy = "priority"
[cache]
block_size = 32
gpu_memory_utilization = 0.5
kv_cache_memory = 1048576
kv_cache_dtype = "bfloat16"
enable-prefix-caching = false
[server]
host = "0.0.0.0"
port = 9000
api_key = "k"
allowed_origins = "*"
shutdown_timeout = 2.5
max_connections = 77
max_body_bytes = 1000
log_level = "debug"
enable_prompt_tokens_details = true
disable_log_stats = true
max_logprobs = 7
max_stop_strings = 3
max_stop_bytes = 40
max_prompts_per_request = 5
max_tools = 6
max_chat_template_kwargs = 7
max_bad_words = 8
root_path = "/api"
chat-template-content-format = "openai"
return_tokens_as_token_ids = true
reasoning_parser = "qwen3"
enable_force_include_usage = true
skip_tokenizer_init = true
[cluster]
head_address = "10.0.0.1:29500"
token = "secret"
host_ip = "10.0.0.2"
max_control_message_bytes = 1048576
)",
                                   "/etc/actorllm/s.toml");
  CHECK(o.model == "/abs/model");
  CHECK(o.tokenizer == "/etc/actorllm/tok");  // relative to the file
  CHECK(o.served_model_names == std::vector<std::string>{"m"});
  CHECK(o.engine.dtype == "bfloat16");
  CHECK(o.engine.load_format == "dummy");
  CHECK(o.engine.max_model_len == 256);
  CHECK(o.engine.seed == 7);
  CHECK(o.chat_template == "{{ messages }}");  // not a file: kept as the template itself
  CHECK(o.generation_config == "vllm");
  CHECK(o.engine.tensor_parallel_size == 4);
  CHECK(o.engine.pipeline_parallel_size == 3);
  CHECK(o.engine.pp_layer_partition == "2,2,1");
  CHECK(o.engine.distributed_executor_backend == "mp");
  CHECK(o.engine.threads == 3);
  CHECK(o.engine.max_num_seqs == 8);
  CHECK(o.engine.max_num_batched_tokens == 99);
  CHECK(o.max_queued_requests == -1);
  CHECK(o.engine.block_size == 32);
  CHECK(o.engine.gpu_memory_utilization == doctest::Approx(0.5));
  CHECK(o.engine.kv_cache_memory == 1048576);
  CHECK(o.host == "0.0.0.0");
  CHECK(o.port == 9000);
  CHECK(o.api_key == "k");
  CHECK(o.allowed_origins == std::vector<std::string>{"*"});
  CHECK(o.shutdown_timeout == doctest::Approx(2.5));
  CHECK(o.max_connections == 77);
  CHECK(o.max_body_bytes == 1000);
  CHECK(o.log_level == "debug");
  CHECK_FALSE(o.engine.enable_prefix_caching);
  CHECK(o.enable_prompt_tokens_details);
  CHECK(o.disable_log_stats);
  CHECK(o.engine.cluster_address == "10.0.0.1:29500");
  CHECK(o.engine.cluster_token == "secret");
  CHECK(o.host_ip == "10.0.0.2");
  CHECK(o.max_control_message_bytes == 1048576);
  CHECK(o.engine.max_worker_restarts == 5);
  CHECK(o.engine.device == "cpu");
  CHECK(o.engine.enable_expert_parallel);
  CHECK_FALSE(o.engine.enable_eplb);
  CHECK(o.engine.eplb.window_size == 50);  // read, though only enable_eplb puts it to use
  CHECK(o.engine.eplb.step_interval == 200);
  CHECK(o.engine.decode_context_parallel_size == 2);
  CHECK(o.engine.dcp_kv_cache_interleave_size == 4);
  CHECK(o.engine.scheduling_policy == "priority");
  CHECK(o.max_logprobs == 7);
  CHECK(o.max_stop_strings == 3);
  CHECK(o.max_stop_bytes == 40);
  CHECK(o.max_prompts_per_request == 5);
  CHECK(o.max_tools == 6);
  CHECK(o.max_chat_template_kwargs == 7);
  CHECK(o.max_bad_words == 8);
  CHECK(o.root_path == "/api");
  CHECK(o.chat_template_content_format == "openai");
  CHECK(o.return_tokens_as_token_ids);
  CHECK(o.engine.data_parallel_size == 4);
  CHECK(o.engine.data_parallel_size_local == 2);
  CHECK(o.engine.data_parallel_rank == 3);
  CHECK(o.engine.enforce_eager);
  CHECK(o.reasoning_parser == "qwen3");
  CHECK(o.enable_force_include_usage);
  CHECK(o.engine.skip_tokenizer_init);
  CHECK(o.engine.enable_lora);
  CHECK(o.lora_modules == std::vector<std::string>{"sql=/adapters/sql", "chat=/adapters/chat"});
  CHECK(o.engine.max_loras == 3);
  CHECK(o.engine.max_lora_rank == 64);
  CHECK(o.engine.max_cpu_loras == 5);
  CHECK(o.engine.kv_cache_dtype == "bfloat16");
  CHECK(app::serve_config_keys().size() == 81);
}

TEST_CASE("a settings file keeps what it does not set, and a chat template file resolves next to it") {
  const fs::path dir = test::make_temp_dir("serve-config");
  std::ofstream{dir / "chat.jinja"} << "{{ x }}";
  std::ofstream{dir / "s.toml"} << "[model]\nchat_template = \"chat.jinja\"\n";
  app::serve_options base;
  base.port = 1234;
  base.engine.tensor_parallel_size = 2;
  auto o = app::read_serve_config_file(dir / "s.toml", base);
  CHECK(o.port == 1234);
  CHECK(o.engine.tensor_parallel_size == 2);
  CHECK(o.chat_template == (dir / "chat.jinja").string());
  CHECK_FALSE(o.gpu_memory_utilization_set);
  CHECK_FALSE(o.engine.enforce_eager);  // CUDA graphs stay on unless asked
}

TEST_CASE("an unknown key is an error naming the section, file and line, with the nearest valid key") {
  auto msg = config_error("[parallel]\ntensor_parallel_size = 2\ntensor_paralel_size = 2\n");
  INFO(msg);
  CHECK(msg.find("unknown key 'tensor_paralel_size' in [parallel] (") != std::string::npos);
  CHECK(msg.find("cluster.toml:3); did you mean 'tensor_parallel_size'?") != std::string::npos);

  auto far = config_error("[server]\nfrobnicate = 1\n");
  CHECK(far.find("unknown key 'frobnicate' in [server]") != std::string::npos);
  CHECK(far.find("did you mean") == std::string::npos);
}

TEST_CASE("an unknown section, a key outside any section and a key set twice are errors") {
  auto section = config_error("[model]\nseed = 1\n\n[paralel]\ntensor_parallel_size = 2\n");
  INFO(section);
  CHECK(section.find("unknown section [paralel]") != std::string::npos);
  CHECK(section.find("cluster.toml:4") != std::string::npos);
  CHECK(section.find("did you mean [parallel]?") != std::string::npos);

  auto top = config_error("port = 8000\n");
  CHECK(top.find("put it under [server]") != std::string::npos);

  auto twice = config_error("[server]\nmax_body_bytes = 1\nmax-body-bytes = 2\n");
  CHECK(twice.find("set twice") != std::string::npos);
}

TEST_CASE("data-parallel settings are checked together, each error naming its flag and the numbers") {
  CHECK_NOTHROW(app::validate_data_parallel(1, 0, -1));
  CHECK_NOTHROW(app::validate_data_parallel(4, 2, 3));
  CHECK_NOTHROW(app::validate_data_parallel(2, 2, 0));
  auto message = [](int size, int local, int rank) {
    try {
      app::validate_data_parallel(size, local, rank);
    } catch (const std::invalid_argument& e) {
      return std::string{e.what()};
    }
    return std::string{"(no error)"};
  };
  CHECK(message(0, 0, -1) == "--data-parallel-size: must be at least 1, got 0");
  CHECK(message(2, -1, -1).find("--data-parallel-size-local: must be in [0, --data-parallel-size 2]") == 0);
  CHECK(message(2, 3, -1).find("got 3") != std::string::npos);
  CHECK(message(2, 0, 2) == "--data-parallel-rank: must be in [0, --data-parallel-size 2), got 2");
  CHECK(message(2, 0, -2) == "--data-parallel-rank: must be in [0, --data-parallel-size 2), got -2");
  // In a settings file the keys have their own ranges.
  CHECK_THROWS_AS(app::parse_serve_config("[parallel]\ndata_parallel_size = 0\n", "s.toml"), app::config_file_error);
  CHECK_THROWS_AS(app::parse_serve_config("[parallel]\ndata_parallel_rank = -2\n", "s.toml"), app::config_file_error);
}

TEST_CASE("a value of the wrong type is an error naming the key, the file and line, and the type expected") {
  auto port = config_error("[server]\nhost = \"::\"\nport = \"8000\"\n", "s.toml");
  INFO(port);
  CHECK(port.find("'port' in [server] (") != std::string::npos);
  CHECK(port.find("s.toml:3) must be an integer, got a string") != std::string::npos);

  CHECK(config_error("[cache]\ngpu_memory_utilization = \"high\"\n").find("must be a number") != std::string::npos);
  CHECK(config_error("[cache]\ngpu_memory_utilization = 1.5\n").find("(0, 1]") != std::string::npos);
  CHECK(config_error("[cache]\nblock_size = 0\n").find("[1, 256]") != std::string::npos);
  CHECK(config_error("[scheduler]\nmax_queued_requests = -2\n").find(">= -1") != std::string::npos);
  CHECK(config_error("[server]\nallowed_origins = [1]\n").find("'allowed_origins'") != std::string::npos);
  auto backend = config_error("[parallel]\ndistributed_executor_backend = \"ray\"\n", "s.toml");
  CHECK(backend.find("s.toml:2) must be one of \"uni\", \"mp\", \"cluster\", got \"ray\"") != std::string::npos);
  CHECK(config_error("[server]\nlog_level = \"loud\"\n").find("'log_level' in [server]") != std::string::npos);
  CHECK(config_error("[cluster]\nhead_address = 5\n").find("'head_address' in [cluster]") != std::string::npos);
  // A device this build cannot run: the key, the line and the value (resolve_device's reason). A build with the CUDA
  // backend takes "cuda" here (whether a GPU is there is the engine's question).
  if (compiled_backends().size() == 1) {
    auto cuda = config_error("[parallel]\ntensor_parallel_size = 1\ndevice = \"cuda\"\n", "s.toml");
    INFO(cuda);
    CHECK(cuda.find("'device' in [parallel] (") != std::string::npos);
    CHECK(cuda.find("s.toml:3)") != std::string::npos);
    CHECK(cuda.find("--device cuda: no CUDA backend in this build") != std::string::npos);
  }
  auto tpu = config_error("[parallel]\ndevice = \"tpu\"\n");
  CHECK(tpu.find("'device' in [parallel]") != std::string::npos);
  CHECK(tpu.find("'tpu' is not a device") != std::string::npos);
  CHECK(config_error("[parallel]\ndevice = 0\n").find("'device' in [parallel]") != std::string::npos);
  CHECK(config_error("parallel = 2\n").find("[parallel]") != std::string::npos);
  auto syntax = config_error("[model\npath = 1\n", "broken.toml");
  CHECK(syntax.find("broken.toml:1") != std::string::npos);
}

TEST_CASE("--allowed-origins takes a JSON list, a comma-separated list, or repeated values") {
  CHECK(app::parse_allowed_origins({R"(["*"])"}) == std::vector<std::string>{"*"});
  CHECK(app::parse_allowed_origins({R"([ "https://a.example", "http://b:8080" ])"}) ==
        std::vector<std::string>{"https://a.example", "http://b:8080"});
  CHECK(app::parse_allowed_origins({"https://a.example, https://b.example", "*"}) ==
        std::vector<std::string>{"https://a.example", "https://b.example", "*"});
  CHECK_THROWS_AS(app::parse_allowed_origins({"[\"*\""}), std::invalid_argument);
  CHECK_THROWS_AS(app::parse_allowed_origins({"[1]"}), std::invalid_argument);
}

// ---- the real binary ----

namespace {

test::command_result run_actorllm(const std::string& args) {
  return test::run_command(test::actorllm_binary().string() + " " + args + " 2>&1");
}

}  // namespace

TEST_CASE("an unknown flag exits 2 and suggests the nearest valid flag") {
  auto r = run_actorllm("serve --tensor-paralel-size 2");
  INFO(r.out);
  CHECK(r.status == 2);
  CHECK(r.out.find("actorllm serve: error: unknown flag --tensor-paralel-size; did you mean --tensor-parallel-size?") !=
        std::string::npos);

  auto eq = run_actorllm("serve --max-num-seq=4");
  CHECK(eq.status == 2);
  CHECK(eq.out.find("did you mean --max-num-seqs?") != std::string::npos);

  auto gen = run_actorllm("generate --max-token 4");
  CHECK(gen.status == 2);
  CHECK(gen.out.find("actorllm generate: error: unknown flag --max-token; did you mean --max-tokens?") !=
        std::string::npos);
}

TEST_CASE("serve --help documents every flag") {
  auto r = run_actorllm("serve --help");
  CHECK(r.status == 0);
  for (const char* flag : {"--config",
                           "--gpu-memory-utilization",
                           "--distributed-executor-backend",
                           "--chat-template",
                           "--generation-config",
                           "--max-queued-requests",
                           "--allowed-origins",
                           "--log-level",
                           "--tensor-parallel-size",
                           "--kv-cache-memory",
                           "--served-model-name",
                           "--device",
                           "--data-parallel-size",
                           "--data-parallel-size-local",
                           "--data-parallel-rank",
                           "--enforce-eager",
                           "--max-stop-strings",
                           "--max-stop-bytes",
                           "--max-prompts-per-request",
                           "--max-tools",
                           "--max-chat-template-kwargs",
                           "--max-bad-words",
                           "--max-connections",
                           "--max-structured-output-bytes",
                           "--max-control-message-bytes"}) {
    INFO(flag);
    CHECK(r.out.find(flag) != std::string::npos);
  }
}

TEST_CASE("serve rejects bad values of the new flags with a message naming the flag") {
  const std::string model = test::model_dir("stories260K").string();
  struct bad_case {
    std::string args;
    std::string expect;
  };
  std::vector<bad_case> cases{
      {"--gpu-memory-utilization 0", "--gpu-memory-utilization"},
      {"--gpu-memory-utilization 1.5", "(0, 1]"},
      {"--distributed-executor-backend ray", "ray is not needed: use cluster"},
      {"--distributed-executor-backend threads", "valid values: uni, mp, cluster"},
      {"--distributed-executor-backend cluster", "the cluster executor needs a cluster and none is configured"},
      {"--max-queued-requests -2", "--max-queued-requests"},
      {"--max-prompts-per-request 0", "--max-prompts-per-request: must be >= 1, got 0"},
      {"--max-stop-strings -1", "--max-stop-strings: must be >= 0, got -1"},
      {"--log-level loud", "--log-level"},
      {"--device tpu", "--device 'tpu' is not a device"},
      {"--allowed-origins '[\"*\"'", "--allowed-origins"},
      {"--config /nonexistent/x.toml", "/nonexistent/x.toml"},
      {"--data-parallel-size 0", "--data-parallel-size: must be at least 1, got 0"},
      {"-dp 2 --data-parallel-rank 2", "--data-parallel-rank: must be in [0, --data-parallel-size 2), got 2"},
      {"-dp 2 --data-parallel-size-local 3", "--data-parallel-size-local: must be in [0, --data-parallel-size 2]"},
      {"--data-parallel-address 10.0.0.1", "--data-parallel-address: not supported here"},
      {"--data-parallel-rpc-port 13345", "--data-parallel-rpc-port: not supported here"},
      {"--data-parallel-backend ray", "--data-parallel-backend ray: not supported here"},
      {"--data-parallel-start-rank 2", "--data-parallel-start-rank 2: not supported here"},
      {"--data-parallel-hybrid-lb", "--data-parallel-hybrid-lb: not supported here"},
      {"--headless", "--headless: not supported here"},
      {"--max-control-message-bytes 100", "--max-control-message-bytes"},
  };
  if (visible_gpu_count() == 0)  // no CUDA backend in the build, or no GPU for it: refused either way
    cases.push_back({"--device cuda", "--device cuda: no"});
  for (const auto& c : cases) {
    auto r = run_actorllm("serve " + model + " --port 0 " + c.args);
    INFO(c.args << " -> " << r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("flags on the command line override the settings file") {
  const fs::path file = write_temp("s.toml", "[parallel]\ndistributed_executor_backend = \"cluster\"\n");
  // The file alone asks for `cluster`, and no cluster is configured.
  auto from_file =
      run_actorllm("--config " + file.string() + " " + test::model_dir("stories260K").string() + " --port 0");
  INFO(from_file.out);
  CHECK(from_file.status != 0);
  CHECK(from_file.out.find("the cluster executor needs a cluster and none is configured") != std::string::npos);
  // The flag replaces it: the run gets as far as loading the (missing) model.
  auto overridden = run_actorllm("serve --config " + file.string() +
                                 " --distributed-executor-backend uni /nonexistent-model --port 0");
  INFO(overridden.out);
  CHECK(overridden.status != 0);
  CHECK(overridden.out.find("cluster executor") == std::string::npos);
  CHECK(overridden.out.find("/nonexistent-model") != std::string::npos);
}

TEST_CASE("actorllm --config configs/serve-stories260k.toml serves stories260K") {
  const fs::path log = test::make_temp_dir("serve-config") / "server.log";
  std::vector<std::string> args{test::actorllm_binary().string(),
                                "--config",
                                (configs_dir / "serve-stories260k.toml").string(),
                                test::model_dir("stories260K").string(),
                                "--port",
                                "0",
                                "--gpu-memory-utilization",
                                "0.8",
                                "--served-model-name",
                                "from-flag"};
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    test::die_with_parent(parent);
    std::FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const std::string marker = "at http://127.0.0.1:";
  uint16_t port = 0;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (port == 0) {
    if (std::chrono::steady_clock::now() > deadline || ::waitpid(pid, nullptr, WNOHANG) != 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      FAIL("the server did not get ready; log:\n" << read_text(log));
    }
    text = read_text(log);
    if (auto at = text.find(marker); at != std::string::npos && text.find('\n', at) != std::string::npos)
      port = static_cast<uint16_t>(std::stoi(text.substr(at + marker.size())));
    else
      std::this_thread::sleep_for(20ms);
  }
  INFO(text);
  CHECK(text.find("Settings from " + (configs_dir / "serve-stories260k.toml").string()) != std::string::npos);
  CHECK(text.find("--gpu-memory-utilization 0.8 applies to GPU backends only") != std::string::npos);
  CHECK(text.find("Loading model " + test::model_dir("stories260K").string()) != std::string::npos);
  // The ready line: the flag's served name, the file's tp 2, the executor, the KV cache, the context, the URL.
  CHECK(text.find("Ready: model 'from-flag'") != std::string::npos);
  CHECK(text.find("tp 2 x pp 1 (layers per stage 5)") != std::string::npos);
  CHECK(text.find("executor uni") != std::string::npos);
  CHECK(text.find("KV blocks of 16 tokens, max_model_len 512") != std::string::npos);

  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  CHECK(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    reply.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);

  REQUIRE(::kill(pid, SIGTERM) == 0);
  int status = 0;
  int exit_code = -1;
  for (auto stop = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < stop;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (exit_code == -1) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  CHECK(exit_code == 0);
}
