// One description of a shard for every executor: make_shard_assignment, shard_args_of and the graph options.
#include "actorllm/error.hpp"
#include "actors/executors/replica.hpp"
#include "actors/runtime/shard_actor.hpp"
#include "runner/model_runner.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

using namespace actorllm;

namespace {

actors::replica_plan two_stage_plan() {
  actors::replica_plan plan;
  plan.r.stages = {{0, 3}, {3, 5}};
  plan.r.max_model_len = 512;
  plan.r.dp_rank = 1;
  plan.r.dp_size = 2;
  plan.threads_per_shard = 3;
  plan.share.device_offset = 8;
  return plan;
}

engine_config two_stage_config() {
  engine_config c;
  c.model = "/models/m";
  c.tensor_parallel_size = 2;
  c.pipeline_parallel_size = 2;
  c.prefill_context_parallel_size = 2;
  c.decode_context_parallel_size = 2;
  c.enforce_eager = true;
  c.max_num_seqs = 64;
  c.dtype = "bfloat16";
  c.seed = 7;
  return c;
}

}  // namespace

TEST_CASE("make_shard_assignment describes shard (stage, copy-major index) from the config and the replica's plan") {
  const engine_config c = two_stage_config();
  const actors::replica_plan plan = two_stage_plan();
  const proto::shard_assignment a = actors::make_shard_assignment(c, plan, 1, 3);
  CHECK(a.model_dir == "/models/m");
  CHECK(a.stage == 1);
  CHECK(a.pp_size == 2);
  CHECK(a.tp_rank == 1);  // index 3 = copy 1, rank 1
  CHECK(a.tp_size == 2);
  CHECK(a.pcp_rank == 1);
  CHECK(a.pcp_size == 2);
  CHECK(a.dcp_size == 2);
  CHECK(a.layer_begin == 3);
  CHECK(a.layer_end == 5);
  CHECK(a.n_threads == 3);
  CHECK(a.device_offset == 8);
  CHECK(a.dp_rank == 1);
  CHECK(a.dp_size == 2);
  CHECK_FALSE(a.samples);  // only index 0 of the last stage samples
  CHECK(actors::make_shard_assignment(c, plan, 1, 0).samples);
  CHECK_FALSE(actors::make_shard_assignment(c, plan, 0, 0).samples);
  CHECK(a.enforce_eager);
  CHECK(a.max_num_seqs == 64);
  CHECK(a.max_model_len == 512);
  CHECK(a.max_loras == 0);            // LoRA off
  CHECK(a.tokenizer == "/models/m");  // no --tokenizer: the model's directory serves
}

TEST_CASE("make_shard_assignment names the engine's tokenizer, absolute, for the sampler's structured outputs") {
  engine_config c = two_stage_config();
  c.tokenizer = "/models/tok";
  CHECK(actors::make_shard_assignment(c, two_stage_plan(), 1, 0).tokenizer == "/models/tok");
  c.tokenizer = "relative/tok";
  const std::string tokenizer = actors::make_shard_assignment(c, two_stage_plan(), 1, 0).tokenizer;
  CHECK(std::filesystem::path(tokenizer).is_absolute());
  CHECK(tokenizer == std::filesystem::absolute("relative/tok").string());
}

TEST_CASE("shard_args_of reads the spec, load options and device from an assignment, lockstep ranks only in lockstep") {
  const engine_config c = two_stage_config();
  actors::replica_plan plan = two_stage_plan();
  actors::shard_args args = actors::shard_args_of(actors::make_shard_assignment(c, plan, 1, 3));
  CHECK(args.spec.tp_rank == 1);
  CHECK(args.spec.tp_size == 2);
  CHECK(args.spec.layer_begin == 3);
  CHECK(args.spec.layer_end == 5);
  CHECK(args.spec.pcp_rank == 1);
  CHECK(args.spec.dcp_size == 2);
  CHECK(args.spec.dp_size == 1);  // not lockstep: the TP group is the EP group
  CHECK(args.load.weight_dtype == dtype::bf16);
  CHECK(args.load.seed == 7);
  CHECK(args.device == device_kind::cpu);
  plan.lockstep = true;
  args = actors::shard_args_of(actors::make_shard_assignment(c, plan, 1, 3));
  CHECK(args.spec.dp_rank == 1);
  CHECK(args.spec.dp_size == 2);
}

TEST_CASE("shard_args_of refuses by name a dtype, load format or device this process cannot run") {
  proto::shard_assignment a = actors::make_shard_assignment(two_stage_config(), two_stage_plan(), 0, 0);
  auto refusal = [](const proto::shard_assignment& x) -> std::string {
    try {
      actors::shard_args_of(x);
    } catch (const actorllm::error& e) {
      CHECK(e.code() == errc::invalid_config);
      return e.what();
    }
    return "";
  };
  proto::shard_assignment bad = a;
  bad.dtype = "float8";
  CHECK(refusal(bad).find("dtype: 'float8'") != std::string::npos);
  bad = a;
  bad.load_format = "pickle";
  CHECK(refusal(bad).find("load_format: 'pickle'") != std::string::npos);
  bad = a;
  bad.device = "tpu";
  CHECK(refusal(bad).find("--device 'tpu'") != std::string::npos);
}

TEST_CASE("an assignment carries --enforce-eager, max_num_seqs and max_model_len into the runner's graph options") {
  proto::shard_assignment a;
  CHECK(actors::shard_graph_options(a).enabled);  // graphs on by default, as vLLM
  a.enforce_eager = true;
  a.max_num_seqs = 64;
  a.max_model_len = 2048;
  const runner::graph_options o = actors::shard_graph_options(a);
  CHECK_FALSE(o.enabled);
  CHECK(o.max_num_seqs == 64);
  CHECK(o.max_model_len == 2048);
}
