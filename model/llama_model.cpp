// The Llama-family forward pass of one shard.
#include "model/llama_model.hpp"

#include "model/model_error.hpp"
#include "util/check.hpp"
#include "util/work_progress.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace actorllm::model {

llama_model::llama_model(const model_config& cfg, model_weights weights, const shard_spec& shard, tp_collective& comm,
                         backend& be, tp_collective* ep_comm)
    : cfg_(cfg), shard_(resolve_shard(cfg, shard)), comm_(comm), be_(be) {
  if (comm_.size() != shard.tp_size * shard.pcp_size)
    throw model_error(fmt::format(
        "TP group has {} ranks but the shard was sliced for tensor_parallel_size {}{}", comm_.size(), shard.tp_size,
        shard.pcp_size > 1 ? fmt::format(" x prefill_context_parallel_size {}", shard.pcp_size) : std::string{}));
  layer_begin_ = shard_.layer_begin;
  layer_end_ = shard_.layer_end;
  tensors_ = bind_weights(llama_weight_table(cfg, shard_), std::move(weights), shard_, be_);
  rope_ = be_.make_rope_table(cfg.rope_cfg());
  for (int64_t l = layer_begin_; l < layer_end_; ++l)
    windows_.push_back(cfg.window_for(l));
  if (cfg.n_expert > 0) {
    std::vector<expert_balancer::layer_ref> moe_layers;
    for (size_t i = 0; i < tensors_.layers.size(); ++i)
      if (!tensors_.layers[i].moe.empty())
        moe_layers.push_back({layer_begin_ + static_cast<int64_t>(i), &tensors_.layers[i].moe});
    moe_ = std::make_unique<moe_block>(cfg, shard_, ep_comm != nullptr ? *ep_comm : comm_, std::move(moe_layers));
  }

  const int64_t hd = cfg.head_dim;
  if (!tensors_.layers.empty()) {
    const layer_weights& first = tensors_.layers.front();
    n_head_ = first.qkv.rows[0] / hd;
    n_head_kv_ = first.qkv.rows[1] / hd;
    for (const layer_weights& w : tensors_.layers)  // the dense MLP layers' rows (none on MoE-only stages)
      if (!w.gate_up.empty()) {
        n_ff_ = std::max(n_ff_, w.gate_up.rows[0]);
        unstacked_mlp_ = unstacked_mlp_ || !w.gate_up.is_merged();
      }
    if (n_head_kv_ <= 0 || n_head_ % n_head_kv_ != 0)
      throw model_error(
          fmt::format("shard holds {} query heads and {} kv heads: not a GQA grouping", n_head_, n_head_kv_));
  }
}

void llama_model::enable_lora(const lora_limits& limits) {
  ACTORLLM_CHECK(!lora_, "enable_lora: LoRA is on already");
  lora_ = std::make_unique<lora_slots>(be_, cfg_, shard_, limits, tensors_.layers);
  eager_ = activations{};  // the scratch gains its LoRA part at the next step
  graph_ = activations{};
}

kv_cache_shape llama_model::cache_shape(int64_t block_size) const {
  // Under decode context parallelism the scheduler's block covers block_size positions, of which each of the
  // group's ranks keeps its share in a block of block_size / dcp_size slots.
  const int64_t shares = int64_t{shard_.dcp_size} * shard_.pcp_size;
  ACTORLLM_CHECK(block_size % shares == 0 && (block_size / shares) % shard_.dcp_interleave == 0,
                 "cache_shape: the block size is not a multiple of the context-parallel group's interleaved runs");
  return kv_cache_shape{layer_end_ - layer_begin_, n_head_kv_,         cfg_.head_dim,
                        block_size / shares,       shard_.kv_layout(), kv_dtype_};
}

void llama_model::set_kv_cache_dtype(dtype type) {
  ACTORLLM_CHECK(type == dtype::f32 || type == dtype::bf16 || type == dtype::f16 || type == dtype::fp8_e4m3,
                 "set_kv_cache_dtype: a KV cache holds f32, bf16, f16 or fp8_e4m3");
  kv_dtype_ = type;
}

namespace {

// The weights that read a layer's normalised input: q|k|v and gate|up, stacked or apart.
std::vector<tensor> normed_input_readers(const layer_weights& w) {
  std::vector<tensor> readers = w.qkv.weight_tensors();
  for (const tensor& t : w.gate_up.weight_tensors())
    readers.push_back(t);
  return readers;
}

std::vector<tensor> down_reader(const layer_weights& w) { return {w.w_down}; }

}  // namespace

dtype llama_model::matmul_input_type_of(std::vector<tensor> (*readers)(const layer_weights&)) const {
  if (lora_ || tensors_.layers.empty())
    return dtype::f32;
  std::optional<dtype> type;
  for (const layer_weights& w : tensors_.layers) {
    if (!w.moe.empty() || w.gate_up.empty())
      return dtype::f32;
    for (const tensor& t : readers(w)) {
      const dtype d = be_.matmul_input_type(t);
      if (type && *type != d)
        return dtype::f32;
      type = d;
    }
  }
  return type.value_or(dtype::f32);
}

dtype llama_model::normed_input_type() const { return matmul_input_type_of(normed_input_readers); }

int64_t llama_model::stacked_width() const { return std::max((n_head_ + 2 * n_head_kv_) * cfg_.head_dim, 2 * n_ff_); }

layer_scratch llama_model::scratch(activations& a, int64_t n) {
  if (n > a.capacity) {
    const int64_t cap = std::max(n, a.capacity * 2);
    const int64_t n_embd = cfg_.n_embd;
    const int64_t q_dim = n_head_ * cfg_.head_dim;
    const int64_t kv_dim = n_head_kv_ * cfg_.head_dim;
    a.x = be_.alloc(dtype::f32, {cap, n_embd});
    a.full.h = be_.alloc(normed_input_type(), {cap, n_embd});
    a.full.q = be_.alloc(dtype::f32, {cap, q_dim});
    a.full.k = be_.alloc(dtype::f32, {cap, kv_dim});
    a.full.v = be_.alloc(dtype::f32, {cap, kv_dim});
    a.full.attn = be_.alloc(dtype::f32, {cap, q_dim});
    a.full.proj = be_.alloc(dtype::f32, {cap, n_embd});
    // SiLU×mul's product, down's input: in the type down reads as it is (matmul_silu_gate for a gate|up bound apart,
    // silu_mul_stacked for a stacked one, write it; no conversion before down). LoRA's silu_mul writes f32 (and
    // matmul_input_type_of says f32 with LoRA).
    a.full.gate = be_.alloc(matmul_input_type_of(down_reader), {cap, std::max<int64_t>(n_ff_, 1)});  // 0 rows: MoE
    // up apart from gate: only for LoRA's gate and up updates, or a gate|up that could not be stacked.
    if (lora_ || unstacked_mlp_)
      a.full.up = be_.alloc(dtype::f32, {cap, std::max<int64_t>(n_ff_, 1)});
    a.full.stacked = be_.alloc(dtype::f32, {cap * stacked_width()});
    if (lora_)
      a.full.lora_shrunk = be_.alloc(dtype::f32, {cap, lora_->max_lora_rank()});
    a.capacity = cap;
  }
  layer_scratch s;
  s.h = a.full.h.slice_rows(0, n);
  s.q = a.full.q.slice_rows(0, n);
  s.k = a.full.k.slice_rows(0, n);
  s.v = a.full.v.slice_rows(0, n);
  s.attn = a.full.attn.slice_rows(0, n);
  s.proj = a.full.proj.slice_rows(0, n);
  s.gate = a.full.gate.slice_rows(0, n);
  if (!a.full.up.empty())
    s.up = a.full.up.slice_rows(0, n);
  s.stacked = a.full.stacked.slice_rows(0, n * stacked_width());
  if (!a.full.lora_shrunk.empty())
    s.lora_shrunk = a.full.lora_shrunk.slice_rows(0, n);
  return s;
}

void llama_model::context_parallel_scratch(activations& a, int64_t n, int64_t c, layer_scratch& s) {
  const int64_t d_size = shard_.dcp_size, p_size = shard_.pcp_size, g_size = comm_.size();
  if (d_size == 1 && p_size == 1)
    return;
  cp_buffers& b = a.cp;
  if (n > b.full_capacity || c > b.local_capacity) {
    const int64_t nf = std::max(n, b.full_capacity * 2), nl = std::max(c, b.local_capacity * 2);
    const int64_t q_dim = n_head_ * cfg_.head_dim, kv_dim = n_head_kv_ * cfg_.head_dim;
    b.t.q_ranks = be_.alloc(dtype::f32, {g_size * nl, q_dim});
    b.t.q_group = be_.alloc(dtype::f32, {nf, d_size * q_dim});
    b.t.out = be_.alloc(dtype::f32, {nf, d_size * q_dim});
    b.t.lse = be_.alloc(dtype::f32, {nf, d_size * n_head_});
    b.t.out_ranks = be_.alloc(dtype::f32, {g_size * nf, d_size * q_dim});
    b.t.lse_ranks = be_.alloc(dtype::f32, {g_size * nf, d_size * n_head_});
    if (p_size > 1) {
      b.t.parts = be_.alloc(dtype::f32, {p_size * d_size * nf, d_size * q_dim});
      b.t.part_lses = be_.alloc(dtype::f32, {p_size * d_size * nf, d_size * n_head_});
      b.t.attn_full = be_.alloc(dtype::f32, {nf, q_dim});
      b.t.kv_ranks = be_.alloc(dtype::f32, {g_size * nl, kv_dim});
      b.t.k_full = be_.alloc(dtype::f32, {p_size * nl, kv_dim});
      b.t.v_full = be_.alloc(dtype::f32, {p_size * nl, kv_dim});
      b.t.reduce = be_.alloc(dtype::f32, {g_size * nl, cfg_.n_embd});
      b.x_ranks = be_.alloc(dtype::f32, {g_size * nl, cfg_.n_embd});
      b.x_full = be_.alloc(dtype::f32, {p_size * nl, cfg_.n_embd});
    }
    b.full_capacity = nf;
    b.local_capacity = nl;
  }
  cp_scratch& v = s.cp;
  v.q_ranks = b.t.q_ranks.slice_rows(0, g_size * c);
  v.q_group = b.t.q_group.slice_rows(0, n);
  v.out = b.t.out.slice_rows(0, n);
  v.lse = b.t.lse.slice_rows(0, n);
  v.out_ranks = b.t.out_ranks.slice_rows(0, g_size * n);
  v.lse_ranks = b.t.lse_ranks.slice_rows(0, g_size * n);
  if (p_size > 1) {
    v.parts = b.t.parts.slice_rows(0, p_size * d_size * n);
    v.part_lses = b.t.part_lses.slice_rows(0, p_size * d_size * n);
    v.attn_full = b.t.attn_full.slice_rows(0, n);
    v.kv_ranks = b.t.kv_ranks.slice_rows(0, g_size * c);
    v.k_full = b.t.k_full.slice_rows(0, p_size * c);
    v.v_full = b.t.v_full.slice_rows(0, p_size * c);
    v.reduce = b.t.reduce;
  }
}

tensor llama_model::forward(const step_inputs& in, kv_cache& cache, const tensor& hidden_in) {
  ACTORLLM_CHECK(cache.shape().n_layer == layer_end_ - layer_begin_, "kv cache has the wrong number of layers");
  if (in.n_tokens == 0)
    return {};
  const tensor x = run_layers(in, cache, hidden_in, eager_);
  tensor out;
  if (!is_last_stage()) {
    out = be_.alloc(dtype::f32, {in.n_tokens, cfg_.n_embd});
    be_.copy(x, out);
  } else {
    out = output_logits(in, x, eager_.full.proj);  // f32 (h may be of the GEMMs' input type), free after the layers
  }
  // Between this step and the next: expert-parallel load balancing may move experts now (every rank of the EP
  // group is here, idle ranks in idle_step).
  if (moe_)
    moe_->end_step(be_);
  return out;
}

bool llama_model::serves_experts() const {
  if (!moe_ || !shard_.expert_parallel || shard_.ep_size() <= 1)
    return false;
  return std::any_of(tensors_.layers.begin(), tensors_.layers.end(),
                     [](const layer_weights& w) { return !w.moe.empty(); });
}

void llama_model::idle_step() {
  ACTORLLM_CHECK(serves_experts(), "idle_step: this shard serves no experts to other replicas");
  for (size_t i = 0; i < tensors_.layers.size(); ++i)
    if (!tensors_.layers[i].moe.empty())
      moe_->forward_idle(be_, layer_begin_ + static_cast<int64_t>(i), tensors_.layers[i].moe);
  moe_->end_step(be_);
}

bool llama_model::graph_capable() const { return is_first_stage() && is_last_stage() && comm_.size() == 1 && !moe_; }

void llama_model::reserve_graph_activations(int64_t n_rows) { scratch(graph_, n_rows); }

void llama_model::forward_into(const step_inputs& in, kv_cache& cache, const tensor& logits) {
  ACTORLLM_CHECK(graph_capable(), "forward_into: only a single-stage, single-rank, dense shard runs graphs");
  ACTORLLM_CHECK(cache.shape().n_layer == layer_end_ - layer_begin_, "kv cache has the wrong number of layers");
  ACTORLLM_CHECK(
      in.n_tokens > 0 && logits.shape.n_dims == 2 && logits.dim(0) == in.n_sample && logits.dim(1) == cfg_.n_vocab,
      fmt::format("forward_into: logits {} for {} sampled rows of {}", logits.describe(), in.n_sample, cfg_.n_vocab)
          .c_str());
  const tensor x = run_layers(in, cache, tensor{}, graph_);
  output_logits(in, x, graph_.full.proj, logits);
}

tensor llama_model::run_layers(const step_inputs& in, kv_cache& cache, const tensor& hidden_in, activations& a) {
  const int64_t n = in.n_tokens;
  const int64_t c = in.local_rows;  // this copy's rows: every row without prefill context parallelism
  const int64_t n_embd = cfg_.n_embd;
  // A request with n > 1 samples one prefill row several times: the sampled rows may outnumber the tokens.
  scratch(a, std::max(c, in.n_sample));
  layer_scratch s = scratch(a, c);
  context_parallel_scratch(a, n, c, s);
  const tensor x = a.x.slice_rows(0, c);
  const layer_context ctx{be_,
                          comm_,
                          in,
                          rope_,
                          n_head_,
                          n_head_kv_,
                          cfg_.head_dim,
                          cfg_.rms_norm_eps,
                          shard_.dcp_size,
                          shard_.pcp_size,
                          shard_.tp_size};

  if (is_first_stage()) {
    be_.embedding(in.local_tokens, tensors_.embed, tensors_.vocab_row_begin, x);
    tp_all_reduce(ctx, x, s);
  } else {
    ACTORLLM_CHECK(!hidden_in.empty() && hidden_in.numel() == n * n_embd, "hidden input has the wrong size");
    if (in.local_count > 0)
      be_.copy(hidden_in.reshape({n, n_embd}).slice_rows(in.local_begin, in.local_count),
               x.slice_rows(0, in.local_count));
  }

  // Each block's output waits in s.proj and joins the residual stream in the next norm (fused add + RMSNorm).
  bool pending = false;
  for (size_t i = 0; i < tensors_.layers.size(); ++i) {
    const layer_weights& w = tensors_.layers[i];
    if (pending)
      be_.add_rms_norm(x, s.proj, w.attn_norm, cfg_.rms_norm_eps, s.h);
    else
      be_.rms_norm(x, w.attn_norm, cfg_.rms_norm_eps, s.h);
    attention(ctx, w, cache.layer(static_cast<int64_t>(i)), windows_[i], s);
    be_.add_rms_norm(x, s.proj, w.ffn_norm, cfg_.rms_norm_eps, s.h);
    if (w.moe.empty())
      ffn(ctx, w, s);
    else
      moe_->forward(ctx, layer_begin_ + static_cast<int64_t>(i), w.moe, s);
    pending = true;
    util::note_work_progress();  // alive and computing, for the step watchdog
  }
  if (pending)
    be_.add(x, s.proj, x);
  if (shard_.pcp_size == 1)
    return x;
  // Every copy's rows, for the next stage or the sampled rows' logits: copy p's from the rank of this TP rank there.
  const int64_t tp = shard_.tp_size, tp_rank = comm_.rank() % tp;
  comm_.all_gather(x, a.cp.x_ranks.slice_rows(0, comm_.size() * c));
  for (int64_t p = 0; p < shard_.pcp_size; ++p) {
    const int64_t rows = std::min(c, n - p * c);
    if (rows > 0)
      be_.copy(a.cp.x_ranks.slice_rows((p * tp + tp_rank) * c, rows), a.cp.x_full.slice_rows(p * c, rows));
  }
  return a.cp.x_full.slice_rows(0, n);
}

tensor llama_model::output_logits(const step_inputs& in, const tensor& x, const tensor& h_rows,
                                  const tensor& logits_out) {
  const int64_t n_sample = in.n_sample;
  if (n_sample == 0)
    return {};
  // Only the sampled rows go through the final norm and the (large) vocabulary projection. A row may be sampled
  // more than once (n > 1), so there may be more of them than tokens: h_rows holds the scratch's whole capacity.
  const tensor h = h_rows.slice_rows(0, n_sample);
  be_.gather_rows(x, in.sample_rows, h);
  be_.rms_norm(h, tensors_.final_norm, cfg_.rms_norm_eps, h);

  const int64_t n_vocab = cfg_.n_vocab;
  const int64_t rows = tensors_.lm_head.dim(0);
  if (!logits_out.empty()) {  // one rank (forward_into checked it)
    be_.matmul(h, tensors_.lm_head, tensor{}, logits_out);
    return logits_out;
  }
  tensor logits = be_.alloc(dtype::f32, {n_sample, n_vocab});
  if (shard_.tp_size == 1) {  // the whole vocabulary here (every copy of the TP group has it under pcp)
    be_.matmul(h, tensors_.lm_head, tensor{}, logits);
    return logits;
  }
  // Vocab-parallel: each rank computes its slice of columns, padded to the common chunk (the padding is never
  // read), then all ranks gather and place the slices side by side. Under prefill context parallelism every copy of
  // the TP group computes the same rows: each takes its own copy's slices.
  const int64_t tp = shard_.tp_size;
  const int64_t first = comm_.rank() / tp * tp;
  const int64_t chunk = (n_vocab + tp - 1) / tp;
  tensor part = be_.alloc(dtype::f32, {n_sample, rows});
  be_.matmul(h, tensors_.lm_head, tensor{}, part);
  tensor local = be_.alloc(dtype::f32, {n_sample, chunk});
  if (rows > 0)
    be_.copy_columns(part, 0, local, 0, rows);
  tensor gathered = be_.alloc(dtype::f32, {comm_.size() * n_sample, chunk});
  comm_.all_gather(local, gathered);
  for (int64_t r = 0; r < tp; ++r) {
    const int64_t begin = r * chunk;
    const int64_t count = std::min(chunk, n_vocab - begin);
    if (count > 0)
      be_.copy_columns(gathered.slice_rows((first + r) * n_sample, n_sample), 0, logits, begin, count);
  }
  return logits;
}

std::vector<float> llama_model::forward(const forward_batch& batch, kv_cache& cache, std::span<const float> hidden_in,
                                        std::span<const lora_source> loras) {
  std::string problem = batch.validate(cache.shape().positions_per_block(), cache.n_blocks());
  ACTORLLM_CHECK(problem.empty(), problem.c_str());
  if (!host_inputs_)
    host_inputs_ = std::make_unique<step_input_builder>(be_, rows_of_copies());
  const std::vector<int32_t> lora_slots = lora_ ? lora_->assign(batch, loras) : std::vector<int32_t>{};
  const step_inputs& in = host_inputs_->prepare(batch, cache.shape(), lora_slots);
  tensor hidden;
  if (!hidden_in.empty()) {
    hidden = be_.alloc(dtype::f32, {static_cast<int64_t>(hidden_in.size())});
    be_.upload(hidden, hidden_in.data(), hidden_in.size() * sizeof(float));
  }
  tensor out = forward(in, cache, hidden);
  std::vector<float> host(static_cast<size_t>(out.empty() ? 0 : out.numel()));
  if (!host.empty())
    be_.download(out, host.data(), host.size() * sizeof(float));
  return host;
}

}  // namespace actorllm::model
