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
  // The rank's physical expert slots; slot s starts with expert s mod n_expert (vLLM's initial EPLB placement; without
  // redundant slots, slot s is expert s).
  const int64_t n_physical = shard.n_physical_experts(cfg.n_expert);
  if (shard.eplb.enabled && shard.expert_parallel && (n_physical % ep_size != 0 || n_physical / ep_size > cfg.n_expert))
    throw model_error(
        fmt::format("expert-parallel load balancing: {} physical experts ({} + {} redundant) must split "
                    "evenly over {} ranks, at most {} each",
                    n_physical, cfg.n_expert, shard.eplb.n_redundant, ep_size, cfg.n_expert));
  const expert_range mine = experts_of_rank(n_physical, shard.ep_rank(), ep_size);
  // Expert parallel: whole experts, only this rank's. Tensor parallel: every expert, split by intermediate rows.
  const shard_kind column = shard.expert_parallel ? shard_kind::replicated : shard_kind::column;
  const shard_kind row = shard.expert_parallel ? shard_kind::replicated : shard_kind::row;
  const std::string_view ff_key = mixtral ? "intermediate_size" : "moe_intermediate_size";
  // Balanced experts move between ranks as raw bytes (model/expert_balancer): kept row-major, never in a backend's
  // own matmul layout, so that every rank's copy of a slot has the same bytes for the same expert.
  const bool movable = shard.expert_parallel && shard.eplb.enabled;
  for (int64_t slot = mine.begin; slot < mine.begin + mine.count; ++slot) {
    const int64_t e = slot % cfg.n_expert;
    const std::string q = fmt::format("{}experts.{}.", p, e);
    const std::string gate = q + (mixtral ? "w1.weight" : "gate_proj.weight");
    const std::string up = q + (mixtral ? "w3.weight" : "up_proj.weight");
    const std::string down = q + (mixtral ? "w2.weight" : "down_proj.weight");
    // gate|up stacked by rows (one GEMM per expert); moved between ranks as the stack's bytes.
    stack_decl stack;
    stack.layer = layer;
    stack.expert = slot;
    stack.expert_slot = &expert_weights::gate_up;
    for (const std::string& name : {gate, up}) {
      weight_decl& d = add(name, {cfg.n_ff_exp, cfg.n_embd}, column, cfg.n_ff_exp, ff_key);
      d.expert = slot;
      d.linear = !movable;
      d.stack = static_cast<int>(table.stacks.size());
      stack.weights.push_back(table.weights.size() - 1);
    }
    table.stacks.push_back(std::move(stack));
    // A row split is along dimension 1: there the units are the expert's intermediate columns.
    weight_decl& d = add(down, {cfg.n_embd, cfg.n_ff_exp}, row, cfg.n_ff_exp, ff_key);
    d.expert = slot;
    d.expert_slot = &expert_weights::w_down;
    d.linear = !movable;
  }

  if (cfg.n_ff_shexp > 0) {
    const std::string q = p + "shared_expert.";
    stack_decl stack;
    stack.layer = layer;
    stack.moe_slot = &moe_weights::shexp_gate_up;
    for (const char* part : {"gate_proj.weight", "up_proj.weight"}) {
      add(q + part, {cfg.n_ff_shexp, cfg.n_embd}, shard_kind::column, cfg.n_ff_shexp, "shared_expert_intermediate_size")
          .stack = static_cast<int>(table.stacks.size());
      stack.weights.push_back(table.weights.size() - 1);
    }
    table.stacks.push_back(std::move(stack));
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
  expert_entry(moe, d.expert, d.name).*d.expert_slot = std::move(t);
}

expert_weights& expert_entry(moe_weights& moe, int64_t expert, std::string_view name) {
  // Expert slots are declared in id order, the rank's first one first.
  if (moe.experts.empty())
    moe.expert_begin = expert;
  const int64_t local = expert - moe.expert_begin;
  if (local < 0 || local > static_cast<int64_t>(moe.experts.size()))
    throw model_error(fmt::format("{}: expert slot {} is not next to this rank's slots", name, expert));
  if (local == static_cast<int64_t>(moe.experts.size()))
    moe.experts.emplace_back();
  return moe.experts[static_cast<size_t>(local)];
}

}  // namespace actorllm::model
