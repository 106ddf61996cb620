// The pipeline split (vLLM's default and explicit partitions) and the tensor-parallel head check, with the numbers
// in every error.
#include "actors/executors/parallel_layout.hpp"
#include "model/model_config.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

using namespace actorllm;
using actors::stage_range;

namespace {

std::vector<stage_range> stages(const actors::layout_result& r) {
  if (auto* err = std::get_if<std::string>(&r))
    FAIL("unexpected error: " << *err);
  return std::get<std::vector<stage_range>>(r);
}

std::string error_of(const actors::layout_result& r) {
  auto* err = std::get_if<std::string>(&r);
  return err ? *err : std::string{"(no error)"};
}

std::vector<int64_t> sizes(const std::vector<stage_range>& s) {
  std::vector<int64_t> out;
  for (const auto& r : s)
    out.push_back(r.n_layers());
  return out;
}

model::model_config heads(int64_t n_head, int64_t n_head_kv) {
  model::model_config c;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  return c;
}

}  // namespace

TEST_CASE("the default split is vLLM's get_pp_indices: remainder to the stages before the last") {
  CHECK(sizes(stages(actors::split_layers(5, 1))) == std::vector<int64_t>{5});
  CHECK(sizes(stages(actors::split_layers(5, 2))) == std::vector<int64_t>{3, 2});
  CHECK(sizes(stages(actors::split_layers(5, 3))) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(stages(actors::split_layers(5, 4))) == std::vector<int64_t>{1, 1, 2, 1});
  CHECK(sizes(stages(actors::split_layers(5, 5))) == std::vector<int64_t>{1, 1, 1, 1, 1});
  CHECK(sizes(stages(actors::split_layers(32, 3))) == std::vector<int64_t>{11, 11, 10});
  CHECK(sizes(stages(actors::split_layers(10, 4))) == std::vector<int64_t>{2, 3, 3, 2});
  auto s = stages(actors::split_layers(5, 2));
  CHECK(s[0] == stage_range{0, 3});
  CHECK(s[1] == stage_range{3, 5});
}

TEST_CASE("an explicit partition is taken as given, and checked") {
  CHECK(sizes(stages(actors::split_layers(5, 2, "1,4"))) == std::vector<int64_t>{1, 4});
  CHECK(sizes(stages(actors::split_layers(5, 3, " 2, 2 ,1"))) == std::vector<int64_t>{2, 2, 1});
  CHECK(error_of(actors::split_layers(5, 2, "3,3")) ==
        "pp_layer_partition \"3,3\" sums to 6 layers but the model has 5 (num_hidden_layers)");
  CHECK(error_of(actors::split_layers(5, 3, "3,2")) ==
        "pp_layer_partition \"3,2\" has 2 stages but pipeline_parallel_size is 3");
  CHECK(error_of(actors::split_layers(5, 2, "5,0")) ==
        "pp_layer_partition \"5,0\": every stage needs at least 1 layer, got 0");
  CHECK(error_of(actors::split_layers(5, 2, "3,two")) == "pp_layer_partition \"3,two\": 'two' is not a layer count");
  CHECK(error_of(actors::split_layers(5, 2, "3,")) == "pp_layer_partition \"3,\": '' is not a layer count");
  CHECK(error_of(actors::split_layers(5, 6)) ==
        "pipeline_parallel_size 6 is larger than the model's 5 layers (num_hidden_layers)");
  CHECK(error_of(actors::split_layers(5, 0)) == "pipeline_parallel_size must be at least 1, got 0");
}

TEST_CASE("heads must split over tp, kv heads split or are replicated") {
  CHECK(actors::check_tensor_parallel(heads(8, 4), 1).empty());
  CHECK(actors::check_tensor_parallel(heads(8, 4), 2).empty());
  CHECK(actors::check_tensor_parallel(heads(8, 4), 4).empty());
  CHECK(actors::check_tensor_parallel(heads(8, 4), 8).empty());  // each kv head on two ranks
  CHECK(actors::check_tensor_parallel(heads(8, 4), 3) ==
        "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  CHECK(actors::check_tensor_parallel(heads(8, 4), 16) ==
        "8 attention heads are not divisible by tensor_parallel_size 16");
  CHECK(actors::check_tensor_parallel(heads(12, 8), 6) ==
        "8 kv heads are neither divisible by tensor_parallel_size 6 nor divide it (to be replicated)");
  CHECK(actors::check_tensor_parallel(heads(32, 8), 16).empty());
  CHECK(actors::check_tensor_parallel(heads(8, 4), 0) == "tensor_parallel_size must be at least 1, got 0");
}

TEST_CASE("plan_layout checks stories260K's layouts from config.json alone") {
  const auto cfg = model::load_model_config(test::model_dir("stories260K"));
  CHECK(sizes(stages(actors::plan_layout(cfg, 2, 2, ""))) == std::vector<int64_t>{3, 2});
  CHECK(sizes(stages(actors::plan_layout(cfg, 4, 5, ""))) == std::vector<int64_t>{1, 1, 1, 1, 1});
  CHECK(error_of(actors::plan_layout(cfg, 3, 1, "")) ==
        "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  CHECK(error_of(actors::plan_layout(cfg, 1, 6, "")).find("larger than the model's 5 layers") != std::string::npos);
}

TEST_CASE("plan_layout with expert parallelism: at least one expert per rank, and expert splits checked") {
  const auto cfg = model::parse_model_config(
      R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 48,
          "moe_intermediate_size": 3, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
          "vocab_size": 97, "max_position_embeddings": 128, "num_experts": 4, "num_experts_per_tok": 2})",
      "moe/config.json");
  CHECK(sizes(stages(actors::plan_layout(cfg, 4, 2, "", true))) == std::vector<int64_t>{1, 1});
  CHECK(error_of(actors::plan_layout(cfg, 8, 1, "", true))
            .find("expert parallelism over 8 ranks needs at least as "
                  "many experts, but the model has 4") != std::string::npos);
  // Tensor-parallel experts split their 3 intermediate rows: more ranks than rows is refused by name.
  CHECK(error_of(actors::plan_layout(cfg, 4, 1, "", false)).find("moe_intermediate_size 3") != std::string::npos);
  CHECK(sizes(stages(actors::plan_layout(cfg, 2, 1, "", false))) == std::vector<int64_t>{2});
}
