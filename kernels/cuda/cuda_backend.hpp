// The CUDA implementation of the backend interface: tensors in device memory (a caching pool), ops queued on one
// stream per backend, GEMMs through cuBLAS, the kernels of kernels/cuda for the rest, sampling included (with
// kernels/cpu/sampling's semantics and random streams; only the per-row results are downloaded).
#pragma once

#include "kernels/backend.hpp"
#include "kernels/cuda/device_memory.hpp"

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
  void upload(const tensor& dst, const void* src, size_t bytes) override;
  void download(const tensor& src, void* dst, size_t bytes) override;
  void copy(const tensor& src, const tensor& dst) override;
  void copy_row(const tensor& t, int64_t src_row, int64_t dst_row) override;
  void synchronize() override;
  /// The stream every op of this backend is queued on: a device collective (custom_all_reduce, NCCL) runs its work
  /// there, ordered with the ops that produce and consume its tensors.
  cudaStream_t stream() const { return stream_; }

  void embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) override;
  void rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) override;
  void add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                    const tensor& out) override;
  void matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) override;
  rope_table make_rope_table(const rope_config& cfg) override;
  void rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k, const tensor& q_norm,
            const tensor& k_norm, float eps) override;
  void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) override;
  void paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                       int64_t window, const tensor& out) override;
  void silu_mul(const tensor& gate, const tensor& up, const tensor& out) override;
  void add(const tensor& a, const tensor& b, const tensor& out) override;
  void gather_rows(const tensor& x, const tensor& rows, const tensor& out) override;
  void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) override;
  void sample(const tensor& logits, std::span<const ops::sample_row> rows, std::span<ops::sample_result> out) override;

 private:
  void make_current() const;
  /// A device scratch of at least `bytes`, grown (never shrunk) as needed; valid until the next call.
  void* scratch(tensor& slot, size_t bytes);

  int device_;
  std::string name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<device_memory_pool> pool_;
  tensor gemm_input_;  // x converted to the weight type for f16/bf16 GEMMs
  tensor attention_workspace_;
  tensor sample_input_;   // the sample_plan's descriptors and edits
  tensor sample_output_;  // the kernel's per-row results
  tensor sample_work_;    // processed logits of the rows with processors or penalties
  std::vector<uint64_t> host_sample_output_;
};

}  // namespace actorllm::cuda
