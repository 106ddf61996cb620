// The engine settings' one table (apps/engine_flags.hpp): `generate` and `serve` bind its flags to engine_config, a
// --config file reads its keys into the same fields, and the checks after the parse name the flag.
#include "apps/engine_flags.hpp"
#include "apps/serve_config_file.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace actorllm;

namespace {

/// `args` parsed by a command with the engine flags of `command`, then checked; the engine settings it gives.
engine_config parse(app::engine_command command, std::vector<std::string> args) {
  CLI::App cli{"test"};
  engine_config cfg;
  auto texts = app::add_engine_flags(cli, cfg, command);
  std::reverse(args.begin(), args.end());  // CLI11 takes them in reverse order
  cli.parse(args);
  app::check_engine_flags(cfg, *texts, command);
  return cfg;
}

std::string refusal(app::engine_command command, std::vector<std::string> args) {
  try {
    parse(command, std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("engine flags: serve and generate bind them to engine_config's fields, with engine_config's defaults") {
  const engine_config defaults;
  CHECK(parse(app::engine_command::serve, {}).kv_cache_memory == defaults.kv_cache_memory);
  const engine_config cfg = parse(app::engine_command::serve, {"--tensor-parallel-size",
                                                               "4",
                                                               "--kv-cache-memory",
                                                               "512MiB",
                                                               "--no-enable-prefix-caching",
                                                               "--max-model-len",
                                                               "100",
                                                               "--seed",
                                                               "7",
                                                               "--gpu-memory-utilization",
                                                               "0.5",
                                                               "--dcp-kv-cache-interleave-size",
                                                               "8",
                                                               "--cluster-address",
                                                               "10.0.0.1:29500",
                                                               "-q",
                                                               "fp8",
                                                               "--max-worker-restarts",
                                                               "0",
                                                               "--max-num-seqs",
                                                               "9"});
  CHECK(cfg.tensor_parallel_size == 4);
  CHECK(cfg.kv_cache_memory == size_t{512} << 20);
  CHECK_FALSE(cfg.enable_prefix_caching);
  CHECK(cfg.max_model_len == 100);
  CHECK(cfg.seed == 7);
  CHECK(cfg.gpu_memory_utilization == doctest::Approx(0.5));
  CHECK(cfg.dcp_kv_cache_interleave_size == 8);
  CHECK(cfg.cluster_address == "10.0.0.1:29500");
  CHECK(cfg.quantization == "fp8");
  CHECK(cfg.max_worker_restarts == 0);
  CHECK(cfg.max_num_seqs == 9);
  // vLLM's later spelling of the interleave flag sets the same field.
  CHECK(parse(app::engine_command::generate, {"--cp-kv-cache-interleave-size", "4"}).dcp_kv_cache_interleave_size == 4);
  // The server's settings are not generate's: one prompt, one engine, no queue.
  CHECK_THROWS_AS(parse(app::engine_command::generate, {"--max-num-seqs", "2"}), CLI::ParseError);
  CHECK_THROWS_AS(parse(app::engine_command::generate, {"--enable-lora"}), CLI::ParseError);
}

TEST_CASE("engine flags: values out of their range are refused after the parse, naming the flag") {
  using app::engine_command;
  CHECK(refusal(engine_command::generate, {"--block-size", "0"}) == "--block-size: must be in [1, 256], got 0");
  CHECK(refusal(engine_command::serve, {"--tensor-parallel-size", "0"}) ==
        "--tensor-parallel-size: must be >= 1, got 0");
  CHECK(refusal(engine_command::serve, {"--gpu-memory-utilization", "1.5"}) ==
        "--gpu-memory-utilization: must be in (0, 1], got 1.5");
  CHECK(refusal(engine_command::generate, {"--dtype", "int4"}) ==
        "--dtype: 'int4' is not one of auto, float32, float16, bfloat16");
  CHECK(refusal(engine_command::serve, {"--load-format", "nope"}) ==
        "--load-format: 'nope' is not one of auto, safetensors, dummy");
  CHECK(refusal(engine_command::serve, {"--kv-cache-memory", "4XB"}) ==
        "--kv-cache-memory: unknown unit 'XB' (use B, KiB, MiB or GiB)");
  CHECK(refusal(engine_command::generate, {"--kv-cache-memory", "lots"}) ==
        "--kv-cache-memory: 'lots' is not a byte count like 4GiB");
  // The data-parallel settings are checked together first, in their own words.
  CHECK(refusal(engine_command::serve, {"--data-parallel-size", "0"}) ==
        "--data-parallel-size: must be at least 1, got 0");
  CHECK(refusal(engine_command::serve, {"--data-parallel-size", "2", "--data-parallel-rank", "2"}) ==
        "--data-parallel-rank: must be in [0, --data-parallel-size 2), got 2");
}

TEST_CASE("engine flags: a --config file reads every key of the table into the field its flag sets") {
  std::set<std::string> keys;
  for (const std::string& k : app::serve_config_keys())
    keys.insert(k);
  for (const app::engine_flag& f : app::engine_flags()) {
    INFO(f.section << "." << f.key);
    CHECK(keys.count(std::string{f.section} + "." + std::string{f.key}) == 1);
  }
  const auto o = app::parse_serve_config(R"(
[model]
quantization = "fp8"
[cache]
kv_cache_memory = "512MiB"
[cluster]
head_address = "10.0.0.1:29500"
tls_ca = "ca.pem"
)",
                                         "/etc/actorllm/s.toml");
  CHECK(o.engine.quantization == "fp8");
  CHECK(o.engine.kv_cache_memory == size_t{512} << 20);
  CHECK(o.engine.cluster_address == "10.0.0.1:29500");
  CHECK(o.engine.cluster_tls_ca_file == "/etc/actorllm/ca.pem");  // relative to the file
  // A file's values are checked as the flags' are, naming the file and line.
  CHECK_THROWS_WITH_AS(app::parse_serve_config("[cache]\nkv_cache_memory = \"4XB\"\n", "s.toml"),
                       "'kv_cache_memory' in [cache] (s.toml:2): unknown unit 'XB' (use B, KiB, MiB or GiB)",
                       app::config_file_error);
  CHECK_THROWS_AS(app::parse_serve_config("[model]\ndtype = \"int4\"\n", "s.toml"), app::config_file_error);
}

TEST_CASE("--eplb-config takes vLLM's JSON keys, refusing unknown keys and bad values by name") {
  using app::engine_command;
  const engine_config defaults;
  CHECK(defaults.eplb == eplb_config{1000, 3000, 0, false});  // vLLM's EPLBConfig defaults
  const engine_config cfg =
      parse(engine_command::serve, {"--enable-expert-parallel", "--enable-eplb", "--eplb-config",
                                    R"({"window_size": 64, "step_interval": 128, "num_redundant_experts": 4,
                                        "log_balancedness": true})"});
  CHECK(cfg.enable_eplb);
  CHECK(cfg.eplb == eplb_config{64, 128, 4, true});
  // Keys left out keep their defaults.
  CHECK(parse(engine_command::generate, {"--eplb-config", R"({"num_redundant_experts": 2})"}).eplb ==
        eplb_config{1000, 3000, 2, false});
  CHECK(refusal(engine_command::serve, {"--eplb-config", R"({"use_async": true})"}) ==
        "--eplb-config: unknown key 'use_async' (known: window_size, step_interval, num_redundant_experts, "
        "log_balancedness)");
  CHECK(refusal(engine_command::serve, {"--eplb-config", R"({"window_size": 0})"}) ==
        "--eplb-config: window_size must be at least 1, got 0");
  CHECK(refusal(engine_command::serve, {"--eplb-config", R"({"num_redundant_experts": -1})"}) ==
        "--eplb-config: num_redundant_experts must be at least 0, got -1");
  CHECK(refusal(engine_command::serve, {"--eplb-config", R"({"step_interval": "often"})"}) ==
        "--eplb-config: step_interval must be an integer, got \"often\"");
  CHECK(refusal(engine_command::serve, {"--eplb-config", R"({"log_balancedness": 1})"}) ==
        "--eplb-config: log_balancedness must be true or false");
  CHECK(refusal(engine_command::serve, {"--eplb-config", "[1]"}) == "--eplb-config: '[1]' is not a JSON object");
  // A --config file writes the same as JSON text or as a table.
  CHECK(app::parse_serve_config("[parallel]\neplb_config = '{\"step_interval\": 10}'\n", "s.toml").engine.eplb ==
        eplb_config{1000, 10, 0, false});
  CHECK(app::parse_serve_config("[parallel]\neplb_config = {window_size = 5, log_balancedness = true}\n", "s.toml")
            .engine.eplb == eplb_config{5, 3000, 0, true});
  CHECK_THROWS_WITH_AS(app::parse_serve_config("[parallel]\neplb_config = {windows = 5}\n", "s.toml"),
                       "'eplb_config' in [parallel] (s.toml:2): unknown key 'windows' (known: window_size, "
                       "step_interval, num_redundant_experts, log_balancedness)",
                       app::config_file_error);
  CHECK_THROWS_WITH_AS(app::parse_serve_config("[parallel]\neplb_config = {step_interval = 0}\n", "s.toml"),
                       "'eplb_config' in [parallel] (s.toml:2): step_interval must be at least 1, got 0",
                       app::config_file_error);
}

TEST_CASE("--kv-cache-dtype: vLLM's values bind to engine_config, unimplemented and unknown ones are refused by name") {
  CHECK(parse(app::engine_command::serve, {}).kv_cache_dtype == "auto");
  for (const char* value : {"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3"}) {
    CAPTURE(value);
    CHECK(parse(app::engine_command::serve, {"--kv-cache-dtype", value}).kv_cache_dtype == value);
    CHECK(parse(app::engine_command::generate, {"--kv-cache-dtype", value}).kv_cache_dtype == value);
  }
  CHECK(refusal(app::engine_command::serve, {"--kv-cache-dtype", "fp8_e5m2"})
            .starts_with("--kv-cache-dtype: 'fp8_e5m2' is not implemented"));
  CHECK(refusal(app::engine_command::serve, {"--kv-cache-dtype", "bf16x"}) ==
        "--kv-cache-dtype: 'bf16x' is not one of auto, bfloat16, float16, float32, fp8, fp8_e4m3");
  // The --config file's [cache] kv_cache_dtype, checked alike.
  CHECK(app::parse_serve_config("[cache]\nkv_cache_dtype = \"bfloat16\"\n", "s.toml").engine.kv_cache_dtype ==
        "bfloat16");
  CHECK_THROWS_WITH_AS(app::parse_serve_config("[cache]\nkv_cache_dtype = \"fp8_inc\"\n", "s.toml"),
                       doctest::Contains("'kv_cache_dtype' in [cache] (s.toml:2): --kv-cache-dtype: 'fp8_inc' is not "
                                         "implemented"),
                       app::config_file_error);
}
