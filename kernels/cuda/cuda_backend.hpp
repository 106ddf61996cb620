// The CUDA implementation of the backend interface: tensors in device memory (a caching pool), ops queued on one
// stream per backend, GEMMs through cuBLAS, the kernels of kernels/cuda for the rest, sampling included (with
// kernels/cpu/sampling's semantics and random streams; only the per-row results are downloaded).
#pragma once

#include "kernels/backend.hpp"
#include "kernels/backend_checks.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/element_type.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace actorllm::cuda {

/// The backend of device "cuda:N".
class cuda_backend final : public backend {
 public:
  /// A backend on visible device `device_index` (after CUDA_VISIBLE_DEVICES). Throws std::runtime_error naming the
  /// device and the driver's reason when it cannot be used.
  explicit cuda_backend(int device_index);
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  device where() const override;
  std::string describe() const override;
  device_memory memory_info() override;
  void reset_peak_memory() override;

  tensor alloc(dtype type, tensor_shape shape) override;
  tensor import_host(tensor host) override;
  /// Weight-only 4- and 8-bit weights with groups a multiple of 16 inputs keep their codes (tensor_layout::cuda_q4 /
  /// cuda_q8, kernels/cuda/quantized_weight.hpp): matmul runs the tensor-core GEMV on them (one pass per 8 rows of
  /// x) up to 32 tokens and dequantizes them to bf16 chunk by chunk for cuBLAS above. Other weight-only formats are
  /// dequantized to bf16 at import (the default); W8A8 is refused by name, as by the default.
  tensor import_quantized_linear(const quantized_linear& w) override;
  void upload(const tensor& dst, const void* src, size_t bytes) override;
  void download(const tensor& src, void* dst, size_t bytes) override;
  void copy(const tensor& src, const tensor& dst) override;
  void synchronize() override;
  /// The stream every op of this backend is queued on: a device collective (custom_all_reduce, NCCL) runs its work
  /// there, ordered with the ops that produce and consume its tensors.
  cudaStream_t stream() const { return stream_; }

  void embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) override;
  /// out f32 or bf16 (rounded once, for the bf16 GEMMs that read it).
  void rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) override;
  /// out f32 or bf16, as rms_norm's.
  void add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                    const tensor& out) override;
  /// bf16 for plain bf16 weights (the GEMV and cuBLAS read a bf16 x as it is), else f32.
  dtype matmul_input_type(const tensor& w) const override;
  /// Plain bf16 weights at up to gemv::max_rows tokens (whole 16-byte rows, aligned: gemv::takes) run the GEMV of
  /// kernels/cuda/gemv.hpp, bias included; other shapes and types cuBLAS.
  void matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) override;
  /// The GEMV's shapes: every output in one launch per three weights (q/k/v), x read once per weight as it is.
  /// Else x rounded to the weights' type once for every output, not once per GEMM; quantized weights run one matmul
  /// each.
  void matmul_group(const tensor& x, std::span<const linear_out> outs) override;
  /// out f32 or bf16 (the down GEMM's input). The GEMV's shapes: gate, up and the SiLU×mul in one launch (`up` is
  /// left as it was). Else x rounded once for the gate and up GEMMs, then silu_mul; quantized weights run two
  /// matmuls, then silu_mul.
  void matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                        const tensor& out) override;
  rope_table make_rope_table(const rope_config& cfg) override;
  void rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k, const tensor& q_norm,
            const tensor& k_norm, float eps) override;
  void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) override;
  /// One kernel: rope's warps over k's heads also write their head's rotated k and v to the cache.
  void rope_write_kv(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                     const tensor& q_norm, const tensor& k_norm, float eps, const kv_layer& cache, const tensor& v,
                     const attention_batch& batch) override;
  void paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                       int64_t window, const tensor& out) override;
  void paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                               int64_t window, const tensor& out, const tensor& lse) override;
  void merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                const tensor& out) override;
  /// out f32 or bf16 (rounded once, for the GEMM that reads it).
  void silu_mul(const tensor& gate, const tensor& up, const tensor& out) override;
  void silu_mul_stacked(const tensor& gate_up, const tensor& out) override;
  void add(const tensor& a, const tensor& b, const tensor& out) override;
  void gather_rows(const tensor& x, const tensor& rows, const tensor& out) override;
  void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) override;
  /// One kernel for all the parts (copy_columns would be one cudaMemcpy2D each).
  void split_columns(const tensor& src, std::span<const tensor> dsts) override;
  void lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots, const tensor& shrunk,
                const tensor& y) override;
  void sample(const tensor& logits, std::span<const ops::sample_row> rows, std::span<ops::sample_result> out) override;

  bool supports_graphs() const override { return true; }
  void use_graph_scratch(bool on) override;
  size_t graph_reserve_bytes() const override;
  std::unique_ptr<op_graph> capture_graph(const std::function<void()>& record) override;

 private:
  /// paged_attention and paged_attention_partial (lse null for the former) after their checks.
  void attend(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale, int64_t window,
              const tensor& out, int64_t n_head, float* lse);
  /// The scratch the ops use internally; one set for eager steps, one for graphs (use_graph_scratch).
  struct scratch_set {
    tensor gemm_input;  // x converted to the weight type for f16/bf16 GEMMs
    tensor attention_workspace;
    tensor dequantized_weight;  // rows of a quantized weight as bf16 for the prefill GEMM (dequant_chunk_rows)
    tensor gate_product;        // matmul_silu_gate's f32 gate GEMM when its out is bf16
  };

  void make_current() const;
  /// A device scratch of at least `bytes`, grown (never shrunk) as needed; valid until the next call. Eager scratch
  /// grows by doubling unless `exact` (a slot whose size is bounded anyway); graph scratch to the exact size (it is
  /// sized once, by the warm-up of every graph size).
  void* scratch(tensor& slot, size_t bytes, bool exact = false);
  /// Throws std::logic_error naming `op` while a graph is being captured (it would allocate, copy from the host or
  /// wait, none of which a graph can hold).
  void not_capturing(const char* op) const;
  /// x's type after checking that matmuls over w take it (f32 or matmul_input_type(w)); names `op` otherwise.
  dtype checked_input_type(const tensor& x, const tensor& w, const char* op) const;
  /// x as the GEMMs over weights of `type` take it: x itself for f32 weights or an x already of `type`, else x
  /// rounded to `type` in scratch (valid until the next op that converts).
  const void* gemm_input(const tensor& x, element_type type);
  /// y = input w^T (+ bias) with input from gemm_input and dimensions already checked.
  void linear_on(const void* input, const backend_checks::linear_dims& d, const tensor& w, const tensor& bias,
                 const tensor& y);
  /// matmul over a cuda_q4 / cuda_q8 weight, dimensions already checked: the GEMV, one pass per qgemv::max_tokens
  /// rows of x, up to qgemv::max_gemv_passes passes; else row chunks dequantized to bf16 and multiplied by cuBLAS.
  void quantized_matmul(const tensor& x, const backend_checks::linear_dims& d, const tensor& w, const tensor& bias,
                        const tensor& y);

  int device_;
  std::string name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<device_memory_pool> pool_;
  scratch_set eager_scratch_;
  scratch_set graph_scratch_;
  scratch_set* scratch_ = &eager_scratch_;
  bool capturing_ = false;
  tensor cublas_workspace_;  // set once graphs are used, so captured GEMMs use memory that lives with the backend
  tensor sample_input_;      // the sample_plan's descriptors and edits
  tensor sample_output_;     // the kernel's per-row results
  tensor sample_work_;       // processed logits of the rows with processors or penalties
  std::vector<uint64_t> host_sample_output_;
};

}  // namespace actorllm::cuda
