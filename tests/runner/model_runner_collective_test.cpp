// How a shard's model_runner treats its TP communicator: a host communicator is staged for a device backend, a
// device communicator (NCCL) is not, and a step fails with the communicator's error when its watchdog broke it while
// the step's device work ran (raise_if_broken after the step's synchronisation), instead of handing on garbage. The
// communicator is a fake here: NCCL itself needs GPUs (tests/kernels/cuda/nccl_collective_gpu_test.cpp).
#include "comm/comm_error.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/model_source.hpp"
#include "runner/model_runner.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>

using namespace actorllm;

namespace {

// One rank whose group can be broken from the test, as a watchdog would break it.
class breakable_collective final : public tp_collective {
 public:
  using tp_collective::all_gather;
  using tp_collective::all_reduce_sum;
  explicit breakable_collective(std::shared_ptr<std::string> broken) : broken_(std::move(broken)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* in, int64_t n, float* out) override { std::copy(in, in + n, out); }
  bool takes_device_tensors() const override { return true; }
  void raise_if_broken() override {
    if (!broken_->empty())
      throw comm::comm_error(*broken_);
  }

 private:
  std::shared_ptr<std::string> broken_;
};

model::loaded_shard tiny_model() {
  auto dir = test::make_temp_dir("actorllm-runner-comm");
  std::ofstream{dir / "config.json"}
      << R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":32,"intermediate_size":64,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":50,
            "max_position_embeddings":64,"rms_norm_eps":1e-5,"rope_theta":10000.0,"torch_dtype":"float32"})";
  model::load_options load;
  load.format = model::load_format::dummy;
  return model::load_shard(dir, model::shard_spec{}, load);
}

}  // namespace

TEST_CASE("model_runner: a step fails with the communicator's error when it broke while the step ran") {
  auto broken = std::make_shared<std::string>();
  auto loaded = tiny_model();
  runner::model_runner runner{std::make_unique<cpu::cpu_backend>(1),
                              std::make_unique<breakable_collective>(broken),
                              loaded.config,
                              std::move(loaded.weights),
                              model::shard_spec{},
                              true};
  runner.allocate_cache(16, 4);
  engine::step_plan plan;
  plan.step_id = 1;
  plan.tokens = {1, 2, 3};
  plan.positions = {0, 1, 2};
  plan.sequences.push_back(engine::scheduled_sequence{engine::seq_id{1, 0}, 0, 3, true, {0}});
  // Healthy: the prefill runs and reports nothing wrong.
  runner::step_output out = runner.run(plan, tensor{});
  CHECK(out.error.empty());
  // Broken meanwhile (as a watchdog thread would, between the step's queued collectives and its synchronisation).
  *broken = "nccl group 'g' rank 0/2: aborted during ncclAllReduce: peer declared dead";
  plan.step_id = 2;
  plan.tokens = {4};
  plan.positions = {3};
  plan.sequences = {engine::scheduled_sequence{engine::seq_id{1, 0}, 0, 1, false, {}}};
  try {
    runner.run(plan, tensor{});
    FAIL("a step over a broken communicator succeeded");
  } catch (const comm::comm_error& e) {
    CHECK(std::string{e.what()}.find("peer declared dead") != std::string::npos);
  }
}
