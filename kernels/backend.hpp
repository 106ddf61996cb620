// The backend interface: memory on one device and the ops of the Llama-family forward pass at model granularity.
// The model, the KV cache and the model runner hold a backend& and tensor handles and never name a device;
// kernels/cpu is the first implementation (kernels/cuda the next). Modelled on ggml's backend/buffer split.
//
// Conventions for every op:
// - Shapes are row-major; "rows" is the outermost dimension. Activations are f32; weights f32, f16 or bf16; ids,
//   positions and block tables i32; cache slots i64.
// - Ops are enqueued on the backend's stream in call order and may run asynchronously; download() and
//   synchronize() wait for everything enqueued before them. The CPU backend runs each op to completion at once.
// - Every tensor an op takes must live on this backend's device. An op may write its output over an input only
//   where its comment says so.
#pragma once

#include "kernels/device.hpp"
#include "kernels/kv_shard_layout.hpp"
#include "kernels/quantized_linear.hpp"
#include "kernels/rope_scaling.hpp"
#include "kernels/sampling.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorllm {

/// One layer's paged KV cache: k and v each [n_blocks, block_size, n_head_kv, head_dim] of one element type (f32,
/// bf16, f16, or on a GPU fp8 e4m3: --kv-cache-dtype), or with `heads_outer` [n_blocks, n_head_kv, block_size,
/// head_dim] (a kv head's rows of a block side by side: backend::kv_heads_outer). The slot of a token is block *
/// block_size + offset_in_block.
/// An fp8 cache holds round(x / scale) and is read back as code * scale, one scale per tensor (vLLM's k_scale and
/// v_scale: 1 unless the checkpoint gives them); the other types ignore the scales.
struct kv_layer {
  tensor k;
  tensor v;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  bool heads_outer = false;

  int64_t n_blocks() const { return k.dim(0); }
  int64_t block_size() const { return k.dim(heads_outer ? 2 : 1); }
  int64_t n_head_kv() const { return k.dim(heads_outer ? 1 : 2); }
  int64_t head_dim() const { return k.dim(3); }
};

/// A step's batch as the attention ops read it, prepared once per step (model_runner) on the backend's device.
/// Sequence s owns query rows [seqs[s][0], seqs[s][0] + seqs[s][1]) and, in position order, the cache blocks
/// block_tables[seqs[s][2] .. seqs[s][2] + seqs[s][3]).
struct attention_batch {
  tensor positions;     ///< i32 [n_tokens]: absolute position of each query row in its sequence
  tensor slots;         ///< i64 [n_tokens]: cache slot each row's k/v is written to (< 0: not written)
  tensor seqs;          ///< i32 [n_seqs, 4]: query_begin, n_query, first block-table entry, n_blocks
  tensor block_tables;  ///< i32 [total blocks]: every sequence's block table, back to back
  int64_t n_tokens = 0;
  int64_t n_seqs = 0;
  /// The positions this rank's cache keeps (decode context parallelism; plain: all of them). slots are written under
  /// it, and paged_attention_partial reads the keys under it.
  kv_shard_layout kv_layout;
  /// Host copies of seqs and block_tables: the CPU kernels walk these; a device backend ignores them.
  std::vector<int32_t> host_seqs;
  std::vector<int32_t> host_block_tables;
};

/// Rotary embedding of one model: the head_dim/2 inverse frequencies (scaling applied), on the device.
struct rope_table {
  tensor inv_freq;  ///< f32 [head_dim / 2]
  int64_t head_dim = 0;
};

/// Memory of a backend's device, for sizing the KV cache (GPU backends: vLLM's gpu_memory_utilization rule). A host
/// backend reports zeros: its cache is sized by --kv-cache-memory instead.
struct device_memory {
  size_t total = 0;        ///< the device's memory
  size_t free = 0;         ///< free on the device now (every process counted)
  size_t in_use = 0;       ///< held by this backend's tensors now
  size_t peak_in_use = 0;  ///< the most this backend held at once since reset_peak_memory()
};

/// One output of backend::matmul_group: y = x w^T (+ bias), with matmul's shapes.
struct linear_out {
  tensor w;
  tensor bias;  ///< or empty
  tensor y;
};

/// A recorded sequence of one backend's ops (a CUDA graph), replayed on its stream as one launch. It reads and
/// writes the device memory the ops named when they were recorded, so the caller keeps those tensors alive and
/// changes their contents (an upload before the replay), never their addresses. The backend must outlive it.
class op_graph {
 public:
  virtual ~op_graph() = default;
  /// Enqueues the recorded ops again, in order, on the backend's stream.
  virtual void replay() = 0;
};

/// A device, its memory and the model-level ops. Not thread-safe: one shard drives one backend from one thread.
class backend {
 public:
  virtual ~backend() = default;

  /// The device this backend runs on.
  virtual device where() const = 0;
  /// Short name for logs: "cpu (8 threads)", "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string describe() const = 0;
  /// The device's memory and this backend's share of it (zeros on the CPU).
  virtual device_memory memory_info() { return {}; }
  /// Starts a new peak of device_memory::peak_in_use (the memory profile of a forward pass).
  virtual void reset_peak_memory() {}

  // ---- memory --------------------------------------------------------------------------------------------------

  /// A tensor of `shape` over fresh, uninitialised device memory. Throws std::bad_alloc when it does not fit.
  virtual tensor alloc(dtype type, tensor_shape shape) = 0;
  /// alloc for a paged KV cache (model::kv_cache), written a slot at a time by every step and read by attention.
  /// Default: alloc. The CPU backend puts it on huge pages.
  virtual tensor alloc_kv_cache(dtype type, tensor_shape shape) { return alloc(type, shape); }
  /// Whether this backend's kernels read a paged KV cache fastest with each block's rows grouped by kv head
  /// (kv_layer::heads_outer), which model::kv_cache then allocates. Default: false (slot by slot). A backend that says
  /// true takes both layouts; one that says false refuses a cache laid out heads outer.
  virtual bool kv_heads_outer() const { return false; }
  /// `host` (a tensor on the CPU) made available on this device: the CPU backend returns it as is, a device backend
  /// allocates and uploads (the host copy may then be dropped). Weights enter the backend this way.
  virtual tensor import_host(tensor host) = 0;
  /// import_host for a Linear weight [n_out, n_in] that only matmul (and matmul_group, matmul_silu_gate) will read:
  /// the backend may lay it out for its kernels (tensor_layout), so no other op may be given the result. Default:
  /// import_host.
  virtual tensor import_linear_weight(tensor host) { return import_host(std::move(host)); }
  /// import_linear_weight of `parts` (host tensors [rows_i, n_in], one dtype and n_in, row-major) stacked by rows,
  /// q/k/v or gate/up as one weight. Default: the rows copied into one host tensor, imported. A backend that lays
  /// weights out may place each part straight into the stacked layout, so nothing is copied twice at start-up.
  /// Throws std::invalid_argument for no parts, or parts of different dtypes, widths or layouts.
  virtual tensor import_stacked_linear_weight(std::span<const tensor> parts);
  /// Whether Linear parts that read one input (q|k|v, gate|up: host tensors as import_stacked_linear_weight takes)
  /// should be stacked into one weight, or imported each as it is and run together by matmul_group and
  /// matmul_silu_gate. Default: stacked (one weight, one kernel launch).
  virtual bool stacks_linear_parts(std::span<const tensor> parts) const {
    (void)parts;
    return true;
  }
  /// A quantized Linear weight (kernels/quantized_linear.hpp) made available for matmul, matmul_group and
  /// matmul_silu_gate only, as import_linear_weight: the result has the weight's logical shape [n_out, n_in] and a
  /// layout of this backend's own. A backend with integer kernels keeps the codes (the CPU: tensor_layout::cpu_q8 /
  /// cpu_q4; CUDA: cuda_q8 / cuda_q4); the default dequantizes to bf16 (exact codes times scales, rounded once) and
  /// imports that, so every backend runs every weight-only format. Weights whose activations are quantized too
  /// (W8A8) change the math and are refused by the default with std::runtime_error naming the backend.
  virtual tensor import_quantized_linear(const quantized_linear& w);
  /// What import_quantized_linear would make of `w`, when this backend keeps such layouts under
  /// quantized_linear::origin (the CPU's packed-weight cache) and has this one; else a tensor without a buffer. Reads
  /// none of w's codes, so a weight whose codes are still unread (quantized_linear::unread) need not be read at all.
  /// Default: none.
  virtual tensor find_quantized_linear(const quantized_linear& w);
  /// Copies `bytes` from host memory into dst, starting at dst's first byte. bytes <= dst.nbytes().
  virtual void upload(const tensor& dst, const void* src, size_t bytes) = 0;
  /// Copies `bytes` of src (from its first byte) to host memory, after everything enqueued before.
  virtual void download(const tensor& src, void* dst, size_t bytes) = 0;
  /// dst = src, byte for byte (same nbytes), both on this device.
  virtual void copy(const tensor& src, const tensor& dst) = 0;
  /// Waits until every enqueued op has finished.
  virtual void synchronize() = 0;

  // ---- ops -----------------------------------------------------------------------------------------------------

  /// out[t] = table[ids[t] - row_begin] as f32 when row_begin <= ids[t] < row_begin + table.rows(), else zeros (a
  /// vocab-parallel shard holds rows [row_begin, row_begin + rows) of the full table; the TP all-reduce of the
  /// shards' outputs is the full lookup). ids: i32 [n]; table: [rows, n_embd] f32/f16/bf16; out: f32 [n, n_embd].
  virtual void embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) = 0;
  /// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for every row r of width weight.numel(). x, out: f32 of equal
  /// shape (out may be x); weight: f32/f16/bf16. out may also be of a type matmul_input_type names (the normalised
  /// rows rounded once, for the GEMMs that read them; then apart from x).
  virtual void rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) = 0;
  /// The residual add fused with the next norm: residual += delta, then out = rms_norm(residual). All f32 [n, width]
  /// except weight, and out, which may be of a type matmul_input_type names as rms_norm's; out must not overlap
  /// residual or delta.
  virtual void add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                            const tensor& out) = 0;
  /// The type in which this backend's matmuls over `w` (a weight as matmul takes it) read x as it is, with no
  /// conversion of their own: f32, or bf16 where the backend's bf16 GEMMs read bf16 (CUDA). matmul, matmul_group and
  /// matmul_silu_gate take x in f32 always and in this type too, and the norms may write it: a model whose every
  /// consumer of a normalised activation is such a matmul keeps that activation in this type. Default: f32.
  virtual dtype matmul_input_type(const tensor& w) const {
    (void)w;
    return dtype::f32;
  }
  /// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]): x f32 [n_tokens, n_in] (or of matmul_input_type(w)); w [n_out,
  /// n_in] f32/f16/bf16 (the Hugging Face Linear layout); bias f32 [n_out] or empty; y f32 [n_tokens, n_out], not
  /// overlapping x. f32 accumulation.
  virtual void matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) = 0;
  /// matmul of every output over the same x (the parts of a Linear stack bound apart): a backend may read x once and
  /// run them as one pass. At most 8 outputs. Default: one matmul each.
  virtual void matmul_group(const tensor& x, std::span<const linear_out> outs) {
    for (const linear_out& o : outs)
      matmul(x, o.w, o.bias, o.y);
  }
  /// The SwiGLU up-projection: out = silu(x w_gate^T) * (x w_up^T). w_gate, w_up: [n_ff, n_in] of one type; up and
  /// out: f32 [n_tokens, n_ff] (out may also be of a type matmul_input_type names: the down projection's input), up
  /// is scratch (may be overwritten), neither overlaps x nor the other. Default: two matmuls and silu_mul.
  virtual void matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                                const tensor& out) {
    matmul(x, w_gate, tensor{}, out);
    matmul(x, w_up, tensor{}, up);
    silu_mul(out, up, out);
  }
  /// matmul_silu_gate through a stacked gate|up weight (model/stacked_linear.hpp): gate_up [2 * n_ff, n_in] holds
  /// gate's rows, then up's; wide: f32 [n_tokens, 2 * n_ff] scratch (may be overwritten); out: f32 or bf16 [n_tokens,
  /// n_ff] (bf16: each value rounded once, the type down reads); none overlaps x or another. Default: the stacked
  /// matmul into wide, then silu_mul_stacked.
  virtual void matmul_silu_stacked(const tensor& x, const tensor& gate_up, const tensor& wide, const tensor& out) {
    matmul(x, gate_up, tensor{}, wide);
    silu_mul_stacked(wide, out);
  }
  /// The rotary table of `cfg` (inverse frequencies computed as transformers does, scaling included).
  virtual rope_table make_rope_table(const rope_config& cfg) = 0;
  /// Rotates q [n_tokens, n_head, head_dim] and k [n_tokens, n_head_kv, head_dim] in place by positions (i32
  /// [n_tokens]), HF rotate_half layout. When q_norm / k_norm are given (Qwen3; f32/f16/bf16 [head_dim]), each head
  /// of q / k is first RMS-normalised with them and `eps`.
  virtual void rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                    const tensor& q_norm, const tensor& k_norm, float eps) = 0;
  /// Writes the k and v rows of the batch's tokens (each f32 [n_tokens, n_head_kv, head_dim]) into their slots
  /// (batch.slots; negative slots are skipped).
  virtual void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) = 0;
  /// rope, then write_kv of the rotated k and of v: the same results (k and q rotated in place, the cache rows
  /// written). Default: the two ops; CUDA runs one kernel (one launch fewer per layer).
  virtual void rope_write_kv(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                             const tensor& q_norm, const tensor& k_norm, float eps, const kv_layer& cache,
                             const tensor& v, const attention_batch& batch) {
    rope(table, positions, q, k, q_norm, k_norm, eps);
    write_kv(cache, k, v, batch);
  }
  /// rope_write_kv, then paged_attention of the rotated q (no context parallelism: batch.kv_layout plain): the same
  /// results. Default: the two ops; the CPU rotates and writes a decode batch's heads inside the attention work that
  /// reads them (no serial pass over the step's q, k and v on one thread first).
  virtual void rope_write_kv_attention(const rope_table& table, const tensor& positions, const tensor& q,
                                       const tensor& k, const tensor& q_norm, const tensor& k_norm, float eps,
                                       const kv_layer& cache, const tensor& v, const attention_batch& batch,
                                       float scale, int64_t window, const tensor& out) {
    rope_write_kv(table, positions, q, k, q_norm, k_norm, eps, cache, v, batch);
    paged_attention(q, batch, cache, scale, window, out);
  }
  /// Causal attention over the paged cache for a batch mixing prefill chunks and decode tokens: query row r at
  /// position p attends to cache positions [max(0, p - window + 1), p] of its sequence (window <= 0: [0, p]). The
  /// rows' own k/v must be written already. q, out: f32 [n_tokens, n_head, head_dim]; GQA: query head h reads kv
  /// head h / (n_head / n_head_kv). Scores are q.k * scale, softmax in f32.
  virtual void paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                               int64_t window, const tensor& out) = 0;
  /// paged_attention over this rank's share of the keys (batch.kv_layout: decode context parallelism), also giving
  /// each (row, head)'s log-sum-exp of its scaled scores in lse (f32 [n_tokens, n_head]). A (row, head) that sees no
  /// key on this rank gets a zero output and lse -inf. merge_attention_partials combines the ranks' results.
  virtual void paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache,
                                       float scale, int64_t window, const tensor& out, const tensor& lse) = 0;
  /// The exact merge of attention outputs over disjoint shares of the keys: parts f32 [n_parts, n_tokens,
  /// n_head_all, head_dim] and lses f32 [n_parts, n_tokens, n_head_all] (paged_attention_partial's results, side
  /// by side); out f32 [n_tokens, n_head, head_dim] receives heads [head_begin, head_begin + n_head) of the merge:
  /// sum over p of exp(lse_p - m) part_p / sum over p of exp(lse_p - m), m = max lse_p, parts taken in order.
  virtual void merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                        const tensor& out) = 0;
  /// out = silu(gate) * up elementwise (f32, equal shapes; out may be gate or up). out may also be of a type
  /// matmul_input_type names (rounded once; then apart from gate and up).
  virtual void silu_mul(const tensor& gate, const tensor& up, const tensor& out) = 0;
  /// silu_mul over a stacked gate|up projection's output (model/stacked_linear.hpp): out[r, j] = silu(gate_up[r, j]) *
  /// gate_up[r, n_ff + j]. gate_up f32 [n, 2 * n_ff]; out f32 or bf16 (each value rounded once) [n, n_ff], not
  /// overlapping gate_up.
  virtual void silu_mul_stacked(const tensor& gate_up, const tensor& out) = 0;
  /// out = a + b elementwise (f32). b has a's numel, or one row's worth (b.numel() == a.row_size(): added to every
  /// row, a bias). out may be a.
  virtual void add(const tensor& a, const tensor& b, const tensor& out) = 0;
  /// out[i] = x[rows[i]]: x [n, width] f32, rows i32 [m], out f32 [m, width].
  virtual void gather_rows(const tensor& x, const tensor& rows, const tensor& out) = 0;
  /// The column ranges of a stacked projection's output apart, in one op: dsts[p] (f32 [n, w_p]) receives columns
  /// [w_0 + ... + w_(p-1), + w_p) of every row of src (f32 [n, W], W >= the sum of the w_p). At most 4 parts, none
  /// overlapping src.
  virtual void split_columns(const tensor& src, std::span<const tensor> dsts) = 0;
  /// dst[r, dst_col + c] = src[r, src_col + c] for c < n_cols and every row r (src, dst f32 2-D, equal rows): puts
  /// vocab shards side by side.
  virtual void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) = 0;
  /// The batched LoRA update of one Linear layer (vLLM's punica shrink + expand), each row with its own adapter: for
  /// every row t whose slot s = row_slots[t] is >= 0, shrunk[t] = a[s] x[t], then y[t] += b[s] shrunk[t]. x f32
  /// [n, n_in]; a f32 [n_slots, rank, n_in]; b f32 [n_slots, n_out, rank] (the adapter's scaling folded in; a
  /// smaller adapter is zero-padded to the stack's rank); row_slots i32 [n], each < n_slots (the CPU aborts on one
  /// that is not; CUDA, which cannot read the slots without a synchronisation, leaves that row as it is); shrunk f32
  /// [n, rank], scratch; y f32 [n, n_out], not overlapping x or shrunk. Rows with a negative slot are left as they
  /// are. f32 accumulation.
  virtual void lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots,
                        const tensor& shrunk, const tensor& y) = 0;
  // ---- graphs (decode steps replayed as one launch; model/decode_graphs.hpp) -----------------------------------

  /// Whether capture_graph works here (CUDA). The CPU runs each op at once and has nothing to record.
  virtual bool supports_graphs() const { return false; }
  /// Routes the backend's internal scratch (GEMM input conversion, attention workspace) to a set kept for graphs
  /// (true) or back to the eager set (false). Graph warm-up runs with it on, so that every op finds its scratch
  /// already at the size the capture needs; eager steps grow (and so move) only the eager set, never memory a graph
  /// reads. No effect where there are no graphs.
  virtual void use_graph_scratch(bool on) { (void)on; }
  /// Device memory the backend itself sets aside once graphs are used (beside the graph scratch, which grows with
  /// the work): what the KV-cache sizing reserves with the graphs' own buffers. 0 where there are no graphs.
  virtual size_t graph_reserve_bytes() const { return 0; }
  /// Records the ops `record` enqueues from this thread into a graph instead of running them. While recording, an
  /// op that would allocate, grow its scratch, synchronise, upload or download throws std::logic_error naming it,
  /// and the capture is dropped. Throws std::logic_error where supports_graphs() is false.
  virtual std::unique_ptr<op_graph> capture_graph(const std::function<void()>& record) {
    (void)record;
    throw std::logic_error("capture_graph: " + describe() + " has no graphs");
  }

  /// Samples one token per row of logits (f32 [rows.size(), n_vocab], used as scratch), row i with rows[i]'s
  /// settings, ids and generator, with the semantics of kernels/cpu/sampling.hpp (vLLM's). out.size() == rows.size().
  virtual void sample(const tensor& logits, std::span<const ops::sample_row> rows,
                      std::span<ops::sample_result> out) = 0;
};

/// A backend on `where` with `n_threads` kernel threads (the CPU backend's pool; a GPU backend uses one thread).
/// Throws std::runtime_error naming the device when this build has no such backend or the device is unusable.
std::unique_ptr<backend> make_backend(device where, int n_threads);
/// make_backend on the first device of `kind`.
std::unique_ptr<backend> make_backend(device_kind kind, int n_threads);

}  // namespace actorllm
