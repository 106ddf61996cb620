// The weights an architecture declares, each with the way tensor parallelism splits it (vLLM's column / row / vocab
// parallel layers), and the arithmetic that turns a declaration and a shard into the slice that shard holds.
#pragma once

#include "kernels/kv_shard_layout.hpp"

#include "model/layer_weights.hpp"
#include "model/model_config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm {
class backend;
}

namespace actorllm::model {

class model_weights;

/// How tensor parallelism splits a weight.
enum class shard_kind : uint8_t {
  replicated,  ///< every rank holds all of it (norms, o_proj's bias)
  column,      ///< dim 0 split (output rows): q/k/v_proj, gate/up_proj and the q/k/v biases
  row,         ///< dim 1 split (input columns), partial sums all-reduced: o_proj, down_proj
  vocab,       ///< dim 0 split in contiguous ranges of ceil(n_vocab / tp_size) rows: embed_tokens, lm_head
};

/// "replicated", "column", "row", "vocab".
std::string_view shard_kind_name(shard_kind kind);

/// One weight the architecture declares, with its full (unsplit) shape. For column/row weights the split dimension
/// is `n_units` units of `unit_size` rows/columns (heads x head_dim for attention, intermediate_size x 1 for the MLP):
/// rank r holds units [r*n_units/tp, (r+1)*n_units/tp) when tp divides n_units; when tp > n_units, n_units divides
/// tp and `allow_replication` is set (GQA kv heads), rank r holds the single unit r / (tp / n_units); when
/// `allow_uneven` is set and tp <= n_units, rank r holds [r*n_units/tp, (r+1)*n_units/tp); anything else is a
/// model_error naming `unit_name` and both numbers.
struct weight_decl {
  std::string name;            ///< Hugging Face tensor name
  std::vector<int64_t> shape;  ///< full shape, as in the checkpoint
  shard_kind kind = shard_kind::replicated;
  int64_t n_units = 1;
  int64_t unit_size = 1;
  bool optional = false;           ///< a checkpoint without it is fine
  bool allow_replication = false;  ///< kv heads may be replicated when tp > n_units (never q heads or MLP columns)
  /// MLP rows/columns may be split unevenly when tp does not divide them (rank r holds units
  /// [r*n_units/tp, (r+1)*n_units/tp), at least one each): exact, because gate/up (column) and down (row) split the
  /// same intermediate units and the partial sums of down_proj are all-reduced.
  bool allow_uneven = false;
  std::string unit_name;  ///< config.json key of n_units, for error messages ("num_key_value_heads")
  /// Where the forward pass reads the loaded tensor: a member of layer `layer`'s struct, or of the model-wide one.
  int64_t layer = -1;
  tensor layer_weights::*layer_slot = nullptr;
  tensor model_tensors::*model_slot = nullptr;
  tensor moe_weights::*moe_slot = nullptr;  ///< or a member of layer `layer`'s MoE block
  int64_t expert = -1;  ///< or a member of this expert slot (global physical slot id; the expert id without EPLB)
  tensor expert_weights::*expert_slot = nullptr;
  bool bind_as_f32 = false;  ///< converted to f32 when bound (biases: the ops add them in f32)
  bool linear = false;       ///< a Linear weight only matmul reads: bound through backend::import_linear_weight
  /// The index in weight_table::stacks of the stacked Linear this weight (or bias) is a part of, or -1: it is bound
  /// with the stack's other parts, and the slots above are unused.
  int stack = -1;
};

/// Linear weights of one input that a shard binds as one stacked_linear (q|k|v_proj and their biases, gate|up_proj;
/// model/stacked_linear.hpp), each still declared (and loaded, sliced, quantized) under its Hugging Face name: the
/// indices in weight_table::weights of the parts' weights and biases (none, or one per part) in output-row order,
/// and the member the stack binds to.
struct stack_decl {
  std::vector<size_t> weights;
  std::vector<size_t> biases;
  int64_t layer = -1;
  stacked_linear layer_weights::*layer_slot = nullptr;
  stacked_linear moe_weights::*moe_slot = nullptr;  ///< or a member of layer `layer`'s MoE block
  int64_t expert = -1;                              ///< or a member of this expert slot
  stacked_linear expert_weights::*expert_slot = nullptr;
};

/// The declared weights of one shard, in declaration order.
struct weight_table {
  std::vector<weight_decl> weights;
  std::vector<stack_decl> stacks;
  /// The declaration called `name`, or nullptr.
  const weight_decl* find(std::string_view name) const;
};

/// Expert-parallel load balancing of a shard's MoE layers (vLLM's EPLB; engine_config::enable_eplb and eplb).
struct expert_balancing {
  bool enabled = false;
  int64_t n_redundant = 0;        ///< physical expert slots beyond the model's experts (num_redundant_experts)
  int64_t window_size = 1000;     ///< steps of expert load a rearrangement balances
  int64_t step_interval = 3000;   ///< steps between rearrangements
  bool log_balancedness = false;  ///< log each rearrangement

  friend bool operator==(const expert_balancing&, const expert_balancing&) = default;
};

/// Which part of the model a shard holds: its tensor-parallel rank and its pipeline stage's layer range.
struct shard_spec {
  int tp_rank = 0;
  int tp_size = 1;
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  ///< one past the last layer; -1 means n_layer
  /// --enable-expert-parallel: MoE layers place whole experts on the ranks of the expert-parallel group (which holds
  /// only its experts) instead of splitting every expert's intermediate rows over the TP ranks.
  bool expert_parallel = false;
  /// The data-parallel replica and their number. Data parallelism does not exist yet (1 replica); the EP group is
  /// already computed from it, as in vLLM: ep_size = dp_size × tp_size, ep_rank = dp_rank × tp_size + tp_rank.
  int dp_rank = 0;
  int dp_size = 1;
  /// With expert_parallel: redundant expert slots and their periodic rearrangement (off: one slot per expert).
  expert_balancing eplb = {};

  /// Decode context parallelism (vLLM's -dcp): the TP ranks [g * dcp_size, (g + 1) * dcp_size), which hold the same
  /// kv head, keep each sequence's KV cache split between them by positions (runs of dcp_interleave tokens) instead
  /// of each a copy of it. Needs tp_size / n_head_kv to be a multiple of dcp_size (resolve_shard checks).
  int dcp_size = 1;
  int dcp_interleave = 1;  ///< --dcp-kv-cache-interleave-size
  /// Prefill context parallelism (vLLM's --prefill-context-parallel-size): pcp_size copies of the stage's TP group
  /// (weights sliced alike) split each step's rows between them, and their caches split every sequence's positions
  /// with the DCP ranks (pcp_size × dcp_size shares). The shard's collective is the stage's group of tp_size ×
  /// pcp_size ranks; this shard is group_rank() in it.
  int pcp_size = 1;
  int pcp_rank = 0;

  int ep_rank() const { return expert_parallel ? dp_rank * tp_size + tp_rank : 0; }
  int ep_size() const { return expert_parallel ? dp_size * tp_size : 1; }
  /// Physical expert slots of an MoE layer over the EP group: the experts, plus the redundant slots under EPLB.
  int64_t n_physical_experts(int64_t n_expert) const {
    return n_expert + (expert_parallel && eplb.enabled ? eplb.n_redundant : 0);
  }
  /// This rank's index in its DCP group, and the positions its cache keeps.
  int dcp_rank() const { return tp_rank % dcp_size; }
  kv_shard_layout kv_layout() const {
    return kv_shard_layout{pcp_size * dcp_size, pcp_rank * dcp_size + dcp_rank(), dcp_interleave};
  }
  /// The stage's group: its TP group, times pcp_size.
  int group_size() const { return tp_size * pcp_size; }
  int group_rank() const { return pcp_rank * tp_size + tp_rank; }
};

/// Why `dcp_size` cannot split the KV cache of a model with n_head_kv kv heads at tensor_parallel_size tp (empty
/// when it can): vLLM's rule, dcp a divisor of tp / n_head_kv (the ranks that would otherwise hold copies of one kv
/// head). The message names the valid sizes.
std::string check_decode_context_parallel(int64_t n_head_kv, int tp_size, int dcp_size);

/// The part of a full tensor one shard holds: indices [begin, end) along dimension `dim`, everything along the
/// others. A replicated weight is dim 0, [0, shape[0]) (or a 0-d tensor's [0, 1)).
struct tensor_slice {
  int dim = 0;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<int64_t> shape;  ///< the slice's shape
};

/// The slice of `decl` that tp rank `tp_rank` of `tp_size` holds. Throws model_error naming the tensor and the
/// numbers when the units cannot be split that way.
tensor_slice slice_for(const weight_decl& decl, int tp_rank, int tp_size);

/// The Llama-family weight table (Llama, Mistral, Qwen2, Qwen3; Hugging Face names) for the layers of `shard`:
/// model.embed_tokens.weight (vocab) on the first stage, and on the last stage too when tie_word_embeddings (the
/// lm_head is then `model.embed_tokens.weight`, and lm_head.weight is not declared); per layer input_layernorm,
/// q/k/v_proj (column by heads; their biases when attention_bias; q_norm/k_norm, replicated, when qk_norm),
/// o_proj (row by heads; its bias, replicated, when o_proj_bias), post_attention_layernorm, gate/up_proj (column),
/// down_proj (row); model.norm.weight and lm_head.weight (vocab) on the last stage. Checks the shard spec and
/// every split before anything is loaded; throws model_error naming the numbers.
weight_table llama_weight_table(const model_config& cfg, const shard_spec& shard);

/// The weights of a mixture-of-experts block (the MoE architectures' MLP on their sparse layers), declared by
/// llama_weight_table: the router (replicated); per expert gate/up (column) and down (row) split by the expert's
/// intermediate rows over the TP ranks, or, with shard.expert_parallel, only the experts of this rank's
/// experts_of_rank range, whole; Qwen2-MoE's shared expert (column/row by its intermediate rows) and its sigmoid
/// gate (replicated). Appended to `table`, bound to layer `layer`'s moe_weights.
void declare_moe_weights(const model_config& cfg, const shard_spec& shard, int64_t layer, weight_table& table);

/// Puts `t`, loaded for declaration `d` (a moe_slot or expert_slot one), into `moe`.
void bind_moe_weight(const weight_decl& d, tensor t, moe_weights& moe);
/// The entry of expert slot `expert` in `moe`, added when it is the next one (slots are declared in id order, the
/// rank's first one first); model_error naming `name` when it is not next to the rank's slots.
expert_weights& expert_entry(moe_weights& moe, int64_t expert, std::string_view name);

/// Binds the loaded weights of `shard` to the members the table names and hands each to `be` (import_host: no copy
/// on the CPU); the parts of each stack are stacked by rows first (bind_stacked_linear). Declared weights that are
/// absent must be optional. Throws model_error naming a missing tensor.
model_tensors bind_weights(const weight_table& table, model_weights weights, const shard_spec& shard, backend& be);

/// `shard` with layer_end -1 replaced by n_layer, after checking 0 <= tp_rank < tp_size and
/// 0 <= layer_begin < layer_end <= n_layer (model_error otherwise).
shard_spec resolve_shard(const model_config& cfg, const shard_spec& shard);

}  // namespace actorllm::model
