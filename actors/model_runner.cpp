// A shard's step pipeline.
#include "actors/model_runner.hpp"

#include <fmt/format.h>

#include <chrono>

namespace actorllm::actors {

model_runner::model_runner(std::unique_ptr<backend> be, std::unique_ptr<tp_collective> comm,
                           const model::model_config& cfg, model::model_weights weights, const model::shard_spec& shard,
                           bool samples)
    : be_(std::move(be)), comm_(std::move(comm)), inputs_(*be_), samples_(samples) {
  model_ = std::make_unique<model::llama_model>(cfg, std::move(weights), shard, *comm_, *be_);
}

void model_runner::allocate_cache(int64_t block_size, int64_t n_blocks) {
  cache_ = std::make_unique<model::kv_cache>(*be_, model_->cache_shape(block_size), n_blocks);
}

tensor model_runner::hidden_input(int64_t n_tokens) {
  return be_->alloc(dtype::f32, {n_tokens, model_->config().n_embd});
}

step_output model_runner::run(const proto::step_plan& plan, const tensor& hidden_in) {
  step_output out;
  const auto t_start = std::chrono::steady_clock::now();
  if (!cache_) {
    out.error = "a step arrived before the weights and the KV cache were ready";
    return out;
  }
  if (samples_)
    samplers_.apply(plan);

  batch_.tokens = plan.tokens;
  batch_.positions = plan.positions;
  batch_.sample_rows = plan.sample_rows;
  batch_.sequences.resize(plan.sequences.size());
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const auto& s = plan.sequences[i];
    batch_.sequences[i].query_begin = s.query_begin;
    batch_.sequences[i].n_query = s.n_query;
    batch_.sequences[i].block_table = s.block_table;
  }
  if (auto err = batch_.validate(cache_->block_size(), cache_->n_blocks()); !err.empty()) {
    out.error = std::move(err);
    return out;
  }
  const int64_t n_embd = model_->config().n_embd;
  if (!model_->is_first_stage() && (hidden_in.empty() || hidden_in.numel() != batch_.n_tokens() * n_embd)) {
    out.error = fmt::format("{} hidden-state floats for {} tokens of {}", hidden_in.empty() ? 0 : hidden_in.numel(),
                            batch_.n_tokens(), n_embd);
    return out;
  }

  const model::step_inputs& in = inputs_.prepare(batch_, cache_->block_size());
  tensor produced = model_->forward(in, *cache_, hidden_in);
  if (!model_->is_last_stage()) {
    out.hidden = std::move(produced);
    return out;
  }
  if (!samples_)
    return out;  // the other ranks of the last stage took part in the logits' all-gather; rank 0 samples
  const auto t_forward = std::chrono::steady_clock::now();
  out.result = samplers_.sample(plan, *be_, produced);
  out.result.forward_seconds = std::chrono::duration<double>(t_forward - t_start).count();
  out.result.sample_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_forward).count();
  return out;
}

}  // namespace actorllm::actors
