// The CPU implementation of the backend interface: host memory and the kernels of kernels/cpu on a thread pool.
// Every op calls the existing cpu:: kernel in the order the model used to, so results are bit-identical to the
// forward pass written against the kernels directly.
#pragma once

#include "kernels/backend.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/packed_weight_cache.hpp"
#include "util/thread_pool.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace actorllm::cpu {

/// The backend of device "cpu": tensors live in host_buffers, ops run to completion on the calling thread and
/// the backend's own pool before they return (synchronize() has nothing to wait for).
class cpu_backend : public backend {
 public:
  /// A backend whose kernels run on `n_threads` threads (the caller included); n_threads >= 1. Packed weights go
  /// through the process's packed_weight_cache (packed_weight_cache::from_environment).
  explicit cpu_backend(int n_threads);
  /// As above with the given cache of packed weights (null: none).
  cpu_backend(int n_threads, std::shared_ptr<packed_weight_cache> weight_cache);

  /// The pool the kernels run on (for benchmarks that drive cpu:: kernels beside the backend).
  thread_pool& pool() { return pool_; }

  device where() const override;
  std::string describe() const override;

  tensor alloc(dtype type, tensor_shape shape) override;
  tensor alloc_kv_cache(dtype type, tensor_shape shape) override;
  /// True: attention reads a kv head's keys of a block as one run (cpu::paged_kv_view::heads_outer).
  bool kv_heads_outer() const override { return true; }
  tensor import_host(tensor host) override;
  /// bf16 weights are packed into tensor_layout::cpu_bf16_panels (huge-page backed) where the kernels read them
  /// (cpu::bf16_panels_preferred: vdpbf16ps, or an AVX2 build), as cpu_bf16_compact_panels where the CPU reads those
  /// (cpu::compact_panels_wanted), or mapped from the packed weight cache where it holds them.
  tensor import_linear_weight(tensor host) override;
  /// bf16 parts whose row counts (all but the last) are whole panels are packed each into its place in the stacked
  /// weight's panels, the rows never copied into a stacked row-major tensor first; others as the default.
  tensor import_stacked_linear_weight(std::span<const tensor> parts) override;
  /// Only parts it packs in place (into bf16 panels): stacking row-major parts would copy them, where apart they are
  /// read where they lie (in the checkpoint's mapping) and matmul_group runs them as one parallel call.
  bool stacks_linear_parts(std::span<const tensor> parts) const override;
  /// Packs w into a cpu::quantized_panels (tensor_layout::cpu_q4 / cpu_q8) for the quantized kernels: W8A8 always,
  /// weight-only formats where the AVX-512 kernels take them; other weight-only formats go the default way
  /// (dequantized to bf16), which the bf16 kernels run faster than the scalar quantized path would.
  tensor import_quantized_linear(const quantized_linear& w) override;
  tensor find_quantized_linear(const quantized_linear& w) override;
  void upload(const tensor& dst, const void* src, size_t bytes) override;
  void download(const tensor& src, void* dst, size_t bytes) override;
  void copy(const tensor& src, const tensor& dst) override;
  void synchronize() override;

  void embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) override;
  void rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) override;
  void add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                    const tensor& out) override;
  void matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) override;
  void matmul_group(const tensor& x, std::span<const linear_out> outs) override;
  void matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                        const tensor& out) override;
  rope_table make_rope_table(const rope_config& cfg) override;
  void rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k, const tensor& q_norm,
            const tensor& k_norm, float eps) override;
  void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) override;
  void paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                       int64_t window, const tensor& out) override;
  void rope_write_kv_attention(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                               const tensor& q_norm, const tensor& k_norm, float eps, const kv_layer& cache,
                               const tensor& v, const attention_batch& batch, float scale, int64_t window,
                               const tensor& out) override;
  void paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                               int64_t window, const tensor& out, const tensor& lse) override;
  void merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                const tensor& out) override;
  void silu_mul(const tensor& gate, const tensor& up, const tensor& out) override;
  void silu_mul_stacked(const tensor& gate_up, const tensor& out) override;
  void matmul_silu_stacked(const tensor& x, const tensor& gate_up, const tensor& wide, const tensor& out) override;
  void add(const tensor& a, const tensor& b, const tensor& out) override;
  void gather_rows(const tensor& x, const tensor& rows, const tensor& out) override;
  void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) override;
  void split_columns(const tensor& src, std::span<const tensor> dsts) override;
  void lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots, const tensor& shrunk,
                const tensor& y) override;
  void sample(const tensor& logits, std::span<const ops::sample_row> rows, std::span<ops::sample_result> out) override;

  /// The bf16 weights packed so far (import_linear_weight, import_stacked_linear_weight): their bytes as packed (a
  /// compact weight about 3/4 of its bf16 bytes, plain panels a little more where rows or inputs are padded) and as
  /// row-major bf16.
  struct packed_bytes {
    size_t packed = 0;
    size_t bf16 = 0;
  };
  packed_bytes packed_weight_bytes() const { return {packed_bytes_.load(), packed_bf16_bytes_.load()}; }

 private:
  thread_pool pool_;
  std::shared_ptr<packed_weight_cache> weight_cache_;
  bool compact_panels_;  // packs bf16 weights as cpu_bf16_compact_panels (cpu::compact_panels_wanted)
  std::atomic<size_t> packed_bytes_{0}, packed_bf16_bytes_{0};  // packed_weight_bytes
  /// `parts` (packs_in_place) packed into one tensor_layout::cpu_bf16_panels weight (each part into its panels), or
  /// cpu_bf16_compact_panels where compact_panels_.
  tensor packed_panels(std::span<const tensor> parts);
  /// `packed`, its bytes added to packed_weight_bytes.
  tensor counted(tensor packed);
  /// paged_attention and paged_attention_partial (lse null for the former) after their checks.
  void attend(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale, int64_t window,
              const tensor& out, int64_t n_head, float* lse, const cpu::decode_rope_write* rope_write = nullptr);

  std::vector<attention_seq> seqs_;         // paged_attention's per-call sequence array, kept to reuse its memory
  std::vector<float> rope_cos_, rope_sin_;  // rope_write_kv_attention's angles per row, kept to reuse their memory
  std::vector<const void*> rng_seen_;       // sample's check for generators shared between rows
};

}  // namespace actorllm::cpu
