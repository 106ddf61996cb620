// Weight declarations of the Llama family and the tensor-parallel slicing arithmetic.
#include "model/weight_table.hpp"

#include "kernels/backend.hpp"
#include "model/model_error.hpp"
#include "model/model_weights.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

namespace actorllm::model {

std::string_view shard_kind_name(shard_kind kind) {
  switch (kind) {
    case shard_kind::replicated:
      return "replicated";
    case shard_kind::column:
      return "column";
    case shard_kind::row:
      return "row";
    case shard_kind::vocab:
      return "vocab";
  }
  return "?";
}

const weight_decl* weight_table::find(std::string_view name) const {
  for (const auto& w : weights)
    if (w.name == name)
      return &w;
  return nullptr;
}

tensor_slice slice_for(const weight_decl& decl, int tp_rank, int tp_size) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
    throw model_error(
        fmt::format("{}: tensor parallel rank {} of size {} is not a valid rank", decl.name, tp_rank, tp_size));
  tensor_slice s;
  s.shape = decl.shape;
  if (decl.shape.empty()) {  // 0-d: only replication makes sense
    if (decl.kind != shard_kind::replicated)
      throw model_error(fmt::format("{}: a scalar cannot be {}-parallel", decl.name, shard_kind_name(decl.kind)));
    s.end = 1;
    return s;
  }
  const int64_t tp = tp_size;
  const int64_t rank = tp_rank;
  switch (decl.kind) {
    case shard_kind::replicated:
      s.end = decl.shape[0];
      return s;
    case shard_kind::vocab: {
      const int64_t n = decl.shape[0];
      const int64_t per_rank = (n + tp - 1) / tp;
      s.begin = std::min(rank * per_rank, n);
      s.end = std::min(s.begin + per_rank, n);
      s.shape[0] = s.end - s.begin;
      return s;
    }
    case shard_kind::column:
    case shard_kind::row:
      break;
  }
  s.dim = decl.kind == shard_kind::column ? 0 : 1;
  if (static_cast<int64_t>(decl.shape.size()) <= s.dim)
    throw model_error(fmt::format("{}: a {}-D tensor cannot be {}-parallel", decl.name, decl.shape.size(),
                                  shard_kind_name(decl.kind)));
  if (decl.n_units < 1 || decl.unit_size < 1 || decl.n_units * decl.unit_size != decl.shape[s.dim])
    throw model_error(fmt::format("{}: dimension {} ({}) is not {} units of {}", decl.name, s.dim, decl.shape[s.dim],
                                  decl.n_units, decl.unit_size));
  const std::string_view unit_name = decl.unit_name.empty() ? std::string_view{"split size"} : decl.unit_name;
  int64_t first_unit = 0;
  int64_t n_rank_units = 0;
  if (decl.n_units % tp == 0) {
    n_rank_units = decl.n_units / tp;
    first_unit = rank * n_rank_units;
  } else if (decl.allow_replication && tp > decl.n_units && tp % decl.n_units == 0) {
    // More ranks than kv heads: each head is held by tp / n_units consecutive ranks, matching the q heads they serve.
    n_rank_units = 1;
    first_unit = rank / (tp / decl.n_units);
  } else if (decl.allow_uneven && tp <= decl.n_units) {
    first_unit = rank * decl.n_units / tp;
    n_rank_units = (rank + 1) * decl.n_units / tp - first_unit;
  } else if (decl.allow_replication && tp > decl.n_units) {
    throw model_error(fmt::format("{}: {} {} does not divide tensor_parallel_size {} (needed to replicate them)",
                                  decl.name, unit_name, decl.n_units, tp));
  } else {
    throw model_error(
        fmt::format("{}: {} {} is not divisible by tensor_parallel_size {}", decl.name, unit_name, decl.n_units, tp));
  }
  s.begin = first_unit * decl.unit_size;
  s.end = (first_unit + n_rank_units) * decl.unit_size;
  s.shape[s.dim] = s.end - s.begin;
  return s;
}

namespace {

/// A loaded bias as f32 (the ops add biases in f32), in place.
void widen_to_f32(host_tensor& h) {
  if (h.type == dtype::f32)
    return;
  host_tensor f(dtype::f32, h.shape);
  for (int64_t i = 0; i < h.numel(); ++i)
    f.data_as<float>()[i] = load_as_f32(h.data(), h.type, static_cast<size_t>(i));
  h = std::move(f);
}

/// Binds the parts of `st` as one stacked_linear where the stack says.
void bind_stack(const weight_table& table, const stack_decl& st, int64_t layer_begin, model_weights& weights,
                backend& be, model_tensors& out) {
  std::vector<stack_part> parts;
  bool linear = true;
  for (size_t i = 0; i < st.weights.size(); ++i) {
    const weight_decl& d = table.weights[st.weights[i]];
    stack_part p{d.name, weights.find_mutable(d.name), nullptr, nullptr};
    if (p.dense == nullptr)
      p.quantized = weights.find_quantized_mutable(d.name);
    if (p.dense == nullptr && p.quantized == nullptr)
      throw model_error(fmt::format("{}: declared by the weight table but not loaded", d.name));
    if (p.quantized != nullptr && !d.linear)
      throw model_error(fmt::format("{}: quantized, but only the layers' Linear weights may be", d.name));
    if (!st.biases.empty()) {
      const weight_decl& b = table.weights[st.biases.at(i)];
      p.bias = weights.find_mutable(b.name);
      if (p.bias == nullptr)
        throw model_error(fmt::format("{}: declared by the weight table but not loaded", b.name));
      widen_to_f32(*p.bias);
    }
    linear = linear && d.linear;
    parts.push_back(p);
  }
  stacked_linear s = bind_stacked_linear(std::move(parts), linear, be, out.weight_bytes);
  layer_weights& lw = out.layers.at(static_cast<size_t>(st.layer - layer_begin));
  if (st.layer_slot != nullptr)
    lw.*st.layer_slot = std::move(s);
  else if (st.moe_slot != nullptr)
    lw.moe.*st.moe_slot = std::move(s);
  else if (st.expert_slot != nullptr)
    expert_entry(lw.moe, st.expert, table.weights[st.weights[0]].name).*st.expert_slot = std::move(s);
  else
    throw model_error(fmt::format("{}: the weight table binds its stack nowhere", table.weights[st.weights[0]].name));
}

}  // namespace

model_tensors bind_weights(const weight_table& table, model_weights weights, const shard_spec& shard_in, backend& be) {
  model_tensors out;
  const int64_t layer_begin = shard_in.layer_begin;
  int64_t n_layers = 0;
  for (const auto& d : table.weights)
    if (d.layer >= 0)
      n_layers = std::max(n_layers, d.layer - layer_begin + 1);
  out.layers.resize(static_cast<size_t>(n_layers));
  for (const auto& d : table.weights) {
    if (d.stack >= 0)  // bound with its stack, below
      continue;
    host_tensor* found = weights.find_mutable(d.name);
    quantized_linear* quantized = found == nullptr ? weights.find_quantized_mutable(d.name) : nullptr;
    if (found == nullptr && quantized == nullptr) {
      if (d.optional)
        continue;
      throw model_error(fmt::format("{}: declared by the weight table but not loaded", d.name));
    }
    tensor t;
    if (quantized != nullptr) {
      if (!d.linear || d.kind == shard_kind::vocab)
        throw model_error(fmt::format("{}: quantized, but only the layers' Linear weights may be", d.name));
      size_t bytes = 0;
      t = bind_quantized_linear(*quantized, be, bytes);
      out.weight_bytes += bytes;
      *quantized = quantized_linear{};  // the backend holds its own layout now
    } else {
      if (d.kind == shard_kind::vocab)
        out.vocab_row_begin = found->row_offset;
      host_tensor h = std::move(*found);
      if (d.bind_as_f32 && h.type != dtype::f32) {
        host_tensor f(dtype::f32, h.shape);
        for (int64_t i = 0; i < h.numel(); ++i)
          f.data_as<float>()[i] = load_as_f32(std::as_const(h).data(), h.type, static_cast<size_t>(i));
        h = std::move(f);
      }
      out.weight_bytes += h.nbytes();
      t = d.linear ? be.import_linear_weight(std::move(h).into_tensor()) : be.import_host(std::move(h).into_tensor());
    }
    if (d.layer_slot != nullptr)
      out.layers[static_cast<size_t>(d.layer - layer_begin)].*d.layer_slot = std::move(t);
    else if (d.moe_slot != nullptr || d.expert_slot != nullptr)
      bind_moe_weight(d, std::move(t), out.layers[static_cast<size_t>(d.layer - layer_begin)].moe);
    else if (d.model_slot != nullptr)
      out.*d.model_slot = std::move(t);
    else
      throw model_error(fmt::format("{}: the weight table binds it nowhere", d.name));
  }
  for (const stack_decl& st : table.stacks)
    bind_stack(table, st, layer_begin, weights, be, out);
  if (out.lm_head.empty())
    out.lm_head = out.embed;  // tie_word_embeddings
  return out;
}

shard_spec resolve_shard(const model_config& cfg, const shard_spec& shard) {
  if (shard.tp_size < 1 || shard.tp_rank < 0 || shard.tp_rank >= shard.tp_size)
    throw model_error(
        fmt::format("tensor parallel rank {} is not in [0, tensor_parallel_size {})", shard.tp_rank, shard.tp_size));
  shard_spec out = shard;
  if (out.layer_end == -1)
    out.layer_end = cfg.n_layer;
  if (out.layer_begin < 0 || out.layer_end > cfg.n_layer)
    throw model_error(fmt::format("pipeline stage layer range [{}, {}) is outside the model's {} layers [0, {})",
                                  shard.layer_begin, shard.layer_end, cfg.n_layer, cfg.n_layer));
  if (out.layer_begin >= out.layer_end)
    throw model_error(
        fmt::format("pipeline stage layer range [{}, {}) holds no layers", shard.layer_begin, shard.layer_end));
  if (auto why = check_decode_context_parallel(cfg.n_head_kv, shard.tp_size, shard.dcp_size); !why.empty())
    throw model_error(why);
  if (shard.pcp_size < 1 || shard.pcp_rank < 0 || shard.pcp_rank >= shard.pcp_size)
    throw model_error(fmt::format("prefill context parallel rank {} is not in [0, prefill_context_parallel_size {})",
                                  shard.pcp_rank, shard.pcp_size));
  if (shard.dcp_interleave < 1)
    throw model_error(fmt::format("dcp_kv_cache_interleave_size must be at least 1, got {}", shard.dcp_interleave));
  return out;
}

std::string check_decode_context_parallel(int64_t n_head_kv, int tp_size, int dcp_size) {
  if (dcp_size == 1)
    return {};
  // The ranks holding copies of one kv head: tp / n_head_kv when the heads are replicated, else none.
  const int64_t copies = tp_size > n_head_kv && n_head_kv > 0 && tp_size % n_head_kv == 0 ? tp_size / n_head_kv : 1;
  if (dcp_size >= 1 && copies % dcp_size == 0)
    return {};
  std::vector<int64_t> valid;
  for (int64_t d = 1; d <= copies; ++d)
    if (copies % d == 0)
      valid.push_back(d);
  return fmt::format(
      "decode_context_parallel_size {} cannot split the KV cache of {} kv heads at "
      "tensor_parallel_size {}: it must divide tensor_parallel_size / num_key_value_heads ({}), the "
      "ranks that would each hold a copy of one kv head; valid sizes: {}",
      dcp_size, n_head_kv, tp_size, copies, fmt::join(valid, ", "));
}

weight_table llama_weight_table(const model_config& cfg, const shard_spec& shard_in) {
  const shard_spec shard = resolve_shard(cfg, shard_in);
  const bool first_stage = shard.layer_begin == 0;
  const bool last_stage = shard.layer_end == cfg.n_layer;
  const int64_t q_dim = cfg.n_head * cfg.head_dim;
  const int64_t kv_dim = cfg.n_head_kv * cfg.head_dim;

  weight_table table;
  // The layer (or -1) and member the next declarations bind to.
  int64_t current_layer = -1;
  tensor layer_weights::*layer_slot = nullptr;
  tensor model_tensors::*model_slot = nullptr;
  auto bind = [&](tensor layer_weights::*slot) {
    layer_slot = slot;
    model_slot = nullptr;
  };
  auto bind_model = [&](tensor model_tensors::*slot) {
    layer_slot = nullptr;
    model_slot = slot;
  };
  auto declare = [&](std::string name, std::vector<int64_t> shape, shard_kind kind, int64_t n_units = 1,
                     int64_t unit_size = 1, std::string_view unit_name = {}, bool allow_replication = false,
                     bool allow_uneven = false) {
    weight_decl d;
    d.layer = layer_slot ? current_layer : -1;
    d.layer_slot = layer_slot;
    d.model_slot = model_slot;
    d.name = std::move(name);
    d.shape = std::move(shape);
    d.kind = kind;
    d.n_units = n_units;
    d.unit_size = unit_size;
    d.unit_name = std::string(unit_name);
    d.allow_replication = allow_replication;
    d.allow_uneven = allow_uneven;
    // Sizes come from config.json: keep every later numel * dtype size computation clear of overflow.
    int64_t bytes = 4;
    for (int64_t dim : d.shape)
      if (__builtin_mul_overflow(bytes, dim, &bytes))
        throw model_error(
            fmt::format("{}: shape [{}] from the model config is too large", d.name, fmt::join(d.shape, ", ")));
    if (kind == shard_kind::replicated || kind == shard_kind::vocab) {
      d.n_units = 1;
      d.unit_size = d.shape.empty() ? 1 : d.shape[0];
    }
    table.weights.push_back(std::move(d));
  };

  // Biases are bound as f32 (the ops add them in f32).
  auto bias = [&] { table.weights.back().bind_as_f32 = true; };
  // Projections only matmul reads (the backend may pack them for its kernels).
  auto linear = [&] { table.weights.back().linear = true; };
  // Parts of a stacked Linear of the current layer, in output-row order: its weights, then their biases.
  auto begin_stack = [&](stacked_linear layer_weights::*slot) {
    stack_decl st;
    st.layer = current_layer;
    st.layer_slot = slot;
    table.stacks.push_back(std::move(st));
  };
  auto add_to_stack = [&](std::vector<size_t> stack_decl::*list) {
    weight_decl& d = table.weights.back();
    d.layer = current_layer;
    d.stack = static_cast<int>(table.stacks.size()) - 1;
    (table.stacks.back().*list).push_back(table.weights.size() - 1);
  };
  auto stack_weight = [&] { add_to_stack(&stack_decl::weights); };
  auto stack_bias = [&] { add_to_stack(&stack_decl::biases); };

  bind_model(&model_tensors::embed);
  if (first_stage || (last_stage && cfg.tie_word_embeddings))
    declare("model.embed_tokens.weight", {cfg.n_vocab, cfg.n_embd}, shard_kind::vocab);
  for (int64_t layer = shard.layer_begin; layer < shard.layer_end; ++layer) {
    current_layer = layer;
    const std::string p = fmt::format("model.layers.{}.", layer);
    bind(&layer_weights::attn_norm);
    declare(p + "input_layernorm.weight", {cfg.n_embd}, shard_kind::replicated);
    // q|k|v (and their biases) are bound as one stack: one GEMM computes them.
    bind(nullptr);
    begin_stack(&layer_weights::qkv);
    declare(p + "self_attn.q_proj.weight", {q_dim, cfg.n_embd}, shard_kind::column, cfg.n_head, cfg.head_dim,
            "num_attention_heads");
    linear();
    stack_weight();
    declare(p + "self_attn.k_proj.weight", {kv_dim, cfg.n_embd}, shard_kind::column, cfg.n_head_kv, cfg.head_dim,
            "num_key_value_heads", true);
    linear();
    stack_weight();
    declare(p + "self_attn.v_proj.weight", {kv_dim, cfg.n_embd}, shard_kind::column, cfg.n_head_kv, cfg.head_dim,
            "num_key_value_heads", true);
    linear();
    stack_weight();
    if (cfg.attention_bias) {
      declare(p + "self_attn.q_proj.bias", {q_dim}, shard_kind::column, cfg.n_head, cfg.head_dim,
              "num_attention_heads");
      bias();
      stack_bias();
      declare(p + "self_attn.k_proj.bias", {kv_dim}, shard_kind::column, cfg.n_head_kv, cfg.head_dim,
              "num_key_value_heads", true);
      bias();
      stack_bias();
      declare(p + "self_attn.v_proj.bias", {kv_dim}, shard_kind::column, cfg.n_head_kv, cfg.head_dim,
              "num_key_value_heads", true);
      bias();
      stack_bias();
    }
    if (cfg.qk_norm) {
      bind(&layer_weights::q_norm);
      declare(p + "self_attn.q_norm.weight", {cfg.head_dim}, shard_kind::replicated);
      bind(&layer_weights::k_norm);
      declare(p + "self_attn.k_norm.weight", {cfg.head_dim}, shard_kind::replicated);
    }
    bind(&layer_weights::wo);
    declare(p + "self_attn.o_proj.weight", {cfg.n_embd, q_dim}, shard_kind::row, cfg.n_head, cfg.head_dim,
            "num_attention_heads");
    linear();
    // Added once after the all-reduce of the row-parallel partial sums, so every rank holds all of it.
    if (cfg.o_proj_bias) {
      bind(&layer_weights::bo);
      declare(p + "self_attn.o_proj.bias", {cfg.n_embd}, shard_kind::replicated);
      bias();
    }
    bind(&layer_weights::ffn_norm);
    declare(p + "post_attention_layernorm.weight", {cfg.n_embd}, shard_kind::replicated);
    if (cfg.is_moe_layer(layer)) {
      declare_moe_weights(cfg, shard, layer, table);
      continue;
    }
    bind(nullptr);
    begin_stack(&layer_weights::gate_up);
    declare(p + "mlp.gate_proj.weight", {cfg.n_ff, cfg.n_embd}, shard_kind::column, cfg.n_ff, 1, "intermediate_size",
            false, true);
    linear();
    stack_weight();
    declare(p + "mlp.up_proj.weight", {cfg.n_ff, cfg.n_embd}, shard_kind::column, cfg.n_ff, 1, "intermediate_size",
            false, true);
    linear();
    stack_weight();
    bind(&layer_weights::w_down);
    declare(p + "mlp.down_proj.weight", {cfg.n_embd, cfg.n_ff}, shard_kind::row, cfg.n_ff, 1, "intermediate_size",
            false, true);
    linear();
  }
  if (last_stage) {
    bind_model(&model_tensors::final_norm);
    declare("model.norm.weight", {cfg.n_embd}, shard_kind::replicated);
    bind_model(&model_tensors::lm_head);
    if (!cfg.tie_word_embeddings) {
      declare("lm_head.weight", {cfg.n_vocab, cfg.n_embd}, shard_kind::vocab);
      linear();
    }
  }

  // Every layer has the same sizes, so checking each declaration once for this rank checks the whole layout.
  for (const auto& w : table.weights)
    slice_for(w, shard.tp_rank, shard.tp_size);
  return table;
}

}  // namespace actorllm::model
