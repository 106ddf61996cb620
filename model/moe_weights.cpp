// The weight declarations of the mixture-of-experts block (Mixtral's block_sparse_moe, Qwen2/3-MoE's sparse mlp)
// and their binding: tensor-parallel experts split by intermediate rows, expert-parallel ones whole on their rank.
#include "model/moe_weights.hpp"

#include "model/model_error.hpp"
#include "model/weight_table.hpp"

#include <fmt/format.h>

namespace actorllm::model {

void declare_moe_weights(const model_config& cfg, const shard_spec& shard, int64_t layer, weight_table& table) {
  const bool mixtral = cfg.architecture == "MixtralForCausalLM";
  const std::string p = fmt::format("model.layers.{}.{}", layer, mixtral ? "block_sparse_moe." : "mlp.");
  auto add = [&](std::string name, std::vector<int64_t> shape, shard_kind kind, int64_t n_units,
                 std::string_view unit_name) -> weight_decl& {
    weight_decl d;
    d.name = std::move(name);
    d.shape = std::move(shape);
    d.kind = kind;
    d.layer = layer;
    d.linear = true;  // every MoE matrix (router, experts, shared expert) is read by matmul only
    if (kind == shard_kind::replicated) {
      d.n_units = 1;
      d.unit_size = d.shape[0];
    } else {
      d.n_units = n_units;
      d.unit_size = 1;
      d.unit_name = std::string(unit_name);
      d.allow_uneven = true;  // exact: gate/up and down split the same intermediate rows, down's sums all-reduced
    }
    table.weights.push_back(std::move(d));
    return table.weights.back();
  };

  add(p + "gate.weight", {cfg.n_expert, cfg.n_embd}, shard_kind::replicated, 1, {}).moe_slot = &moe_weights::router;

  const int ep_size = shard.ep_size();
  if (ep_size > cfg.n_expert)
    throw model_error(
        fmt::format("expert parallelism over {} ranks needs at least as many experts, but the model has "
                    "{} (num_experts / num_local_experts)",
                    ep_size, cfg.n_expert));
  const expert_range mine = experts_of_rank(cfg.n_expert, shard.ep_rank(), ep_size);
  // Expert parallel: whole experts, only this rank's. Tensor parallel: every expert, split by intermediate rows.
  const shard_kind column = shard.expert_parallel ? shard_kind::replicated : shard_kind::column;
  const shard_kind row = shard.expert_parallel ? shard_kind::replicated : shard_kind::row;
  const std::string_view ff_key = mixtral ? "intermediate_size" : "moe_intermediate_size";
  for (int64_t e = mine.begin; e < mine.begin + mine.count; ++e) {
    const std::string q = fmt::format("{}experts.{}.", p, e);
    const std::string gate = q + (mixtral ? "w1.weight" : "gate_proj.weight");
    const std::string up = q + (mixtral ? "w3.weight" : "up_proj.weight");
    const std::string down = q + (mixtral ? "w2.weight" : "down_proj.weight");
    for (auto [name, slot] : {std::pair{gate, &expert_weights::w_gate}, std::pair{up, &expert_weights::w_up}}) {
      weight_decl& d = add(name, {cfg.n_ff_exp, cfg.n_embd}, column, cfg.n_ff_exp, ff_key);
      d.expert = e;
      d.expert_slot = slot;
    }
    // A row split is along dimension 1: there the units are the expert's intermediate columns.
    weight_decl& d = add(down, {cfg.n_embd, cfg.n_ff_exp}, row, cfg.n_ff_exp, ff_key);
    d.expert = e;
    d.expert_slot = &expert_weights::w_down;
  }

  if (cfg.n_ff_shexp > 0) {
    const std::string q = p + "shared_expert.";
    add(q + "gate_proj.weight", {cfg.n_ff_shexp, cfg.n_embd}, shard_kind::column, cfg.n_ff_shexp,
        "shared_expert_intermediate_size")
        .moe_slot = &moe_weights::shexp_gate;
    add(q + "up_proj.weight", {cfg.n_ff_shexp, cfg.n_embd}, shard_kind::column, cfg.n_ff_shexp,
        "shared_expert_intermediate_size")
        .moe_slot = &moe_weights::shexp_up;
    add(q + "down_proj.weight", {cfg.n_embd, cfg.n_ff_shexp}, shard_kind::row, cfg.n_ff_shexp,
        "shared_expert_intermediate_size")
        .moe_slot = &moe_weights::shexp_down;
    add(p + "shared_expert_gate.weight", {1, cfg.n_embd}, shard_kind::replicated, 1, {}).moe_slot =
        &moe_weights::shexp_router;
  }
}

void bind_moe_weight(const weight_decl& d, tensor t, moe_weights& moe) {
  if (d.moe_slot != nullptr) {
    moe.*d.moe_slot = std::move(t);
    return;
  }
  // Experts are declared in id order, the rank's first one first.
  if (moe.experts.empty())
    moe.expert_begin = d.expert;
  const int64_t local = d.expert - moe.expert_begin;
  if (local < 0 || local > static_cast<int64_t>(moe.experts.size()))
    throw model_error(fmt::format("{}: expert {} is not next to this rank's experts", d.name, d.expert));
  if (local == static_cast<int64_t>(moe.experts.size()))
    moe.experts.emplace_back();
  moe.experts[static_cast<size_t>(local)].*d.expert_slot = std::move(t);
}

}  // namespace actorllm::model
