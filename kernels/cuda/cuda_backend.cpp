// The CUDA backend: argument checks (as the CPU backend's: cheap compares, messages formatted only on failure), then
// the launchers of kernels/cuda on the backend's stream.
#include "kernels/cuda/cuda_backend.hpp"

#include "kernels/backend_checks.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cuda/attention_plan.hpp"
#include "kernels/cuda/cublas_library.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/lora.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_attention_small.hpp"
#include "kernels/cuda/prefill_attention.hpp"
#include "kernels/cuda/quantized_gemv.hpp"
#include "kernels/cuda/quantized_weight.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/sampling.hpp"
#include "kernels/cuda/sampling_plan.hpp"
#include "util/check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace actorllm::cuda {
namespace {

float* f32(const tensor& t) { return t.data_as<float>(); }

element_type element_of(dtype t) {
  switch (t) {
    case dtype::f32:
      return element_type::f32;
    case dtype::f16:
      return element_type::f16;
    case dtype::bf16:
      return element_type::bf16;
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      break;
  }
  ACTORLLM_CHECK(false, "cuda backend: integer tensors hold no weights or activations");
  return element_type::f32;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(fmt::format("{} failed: {}", what, cublas_status_name(status)));
}

bool is_quantized_weight(const tensor& w) {
  return w.layout == tensor_layout::cuda_q4 || w.layout == tensor_layout::cuda_q8;
}

// The image of a cuda_q4 / cuda_q8 weight, which only import_quantized_linear makes.
const quantized_weight& quantized_weight_of(const tensor& w) {
  const auto* q = dynamic_cast<const quantized_weight*>(w.buf.get());
  ACTORLLM_CHECK(q != nullptr && q->layout().n_out == w.dim(0) && q->layout().n_in == w.dim(1) && w.offset == 0,
                 fmt::format("matmul: {} is not a quantized weight of this backend", w.describe()).c_str());
  return *q;
}

// Whether the small-batch GEMV (kernels/cuda/gemv.hpp) computes x w^T: plain bf16 weights, at most the tuning's
// max_rows rows of x, whole 16-byte chunks of aligned memory, and (`any_size` false: matmul, matmul_group) a weight no
// larger than the tuning's max_elements. Else cuBLAS (gemv::tuning says where each was measured faster).
bool gemv_takes(const tensor& x, const tensor& w, int64_t n_tokens, int64_t n_in, bool any_size = false) {
  const gemv::tuning& t = gemv_tuning();
  return w.type == dtype::bf16 && w.layout == tensor_layout::row_major &&
         (x.type == dtype::f32 || x.type == dtype::bf16) &&
         gemv::takes(n_tokens, n_in, w.data(), x.data(), t.max_rows) &&
         (any_size || gemv::takes_weight_of(w.numel(), t));
}

bool is_bf16(const tensor& t) { return t.type == dtype::bf16; }

}  // namespace

using checker = backend_checks;

// ---- lifetime ----------------------------------------------------------------------------------------------------

cuda_backend::cuda_backend(int device_index) : device_(device_index) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(fmt::format("cuda:{}: no usable CUDA driver or GPU ({}: {})", device_index,
                                         cudaGetErrorName(err), cudaGetErrorString(err)));
  }
  if (device_index < 0 || device_index >= count)
    throw std::runtime_error(
        fmt::format("cuda:{}: this process sees {} GPU(s) (CUDA_VISIBLE_DEVICES={})", device_index, count,
                    std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset"));
  try {
    (void)gemv_tuning();  // a malformed ACTORLLM_GEMV stops the backend here, not at its first matmul
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("cuda:{}: {}", device_index, e.what()));
  }
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  ACTORLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = prop.name;
  sm_count_ = prop.multiProcessorCount;
  ACTORLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  check_cublas(cublas().create(&cublas_), "cublasCreate");
  check_cublas(cublas().set_stream(cublas_, stream_), "cublasSetStream");
  // Default math: no TF32 in SGEMM, so the f32 path stays close enough to the CPU for the goldens.
  check_cublas(cublas().set_math_mode(cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  pool_ = std::make_shared<device_memory_pool>(device_);
}

cuda_backend::~cuda_backend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr)
    cudaStreamSynchronize(stream_);
  eager_scratch_ = scratch_set{};
  graph_scratch_ = scratch_set{};
  cublas_workspace_ = tensor{};
  if (cublas_ != nullptr)
    cublas().destroy(cublas_);
  if (stream_ != nullptr)
    cudaStreamDestroy(stream_);
  // pool_ lives on while tensors of this backend do (each buffer holds it).
}

void cuda_backend::make_current() const { ACTORLLM_CUDA_CHECK(cudaSetDevice(device_)); }

device cuda_backend::where() const { return device{device_kind::cuda, device_}; }

std::string cuda_backend::describe() const { return fmt::format("cuda:{} ({})", device_, name_); }

device_memory cuda_backend::memory_info() {
  make_current();
  size_t free = 0, total = 0;
  ACTORLLM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const pool_usage u = pool_->usage();
  return device_memory{total, free, u.in_use, u.peak_in_use};
}

void cuda_backend::reset_peak_memory() { pool_->reset_peak(); }

void* cuda_backend::scratch(tensor& slot, size_t bytes, bool exact) {
  if (slot.empty() || slot.nbytes() < bytes) {
    if (capturing_)
      throw std::logic_error(
          fmt::format("graph capture: an op needs {} bytes of scratch beyond the {} its warm-up "
                      "sized (the warm-up must run the captured shapes first)",
                      bytes, slot.empty() ? 0 : slot.nbytes()));
    const size_t words = (std::max<size_t>(bytes, 4) + 3) / 4;
    slot = alloc(dtype::i32, {static_cast<int64_t>(exact || scratch_ == &graph_scratch_ ? words : words * 2 + 1)});
  }
  return slot.data();
}

void cuda_backend::not_capturing(const char* op) const {
  if (capturing_)
    throw std::logic_error(fmt::format("graph capture: {} cannot be recorded into a graph", op));
}

// ---- graphs ------------------------------------------------------------------------------------------------------

namespace {

// cuBLAS's workspace for every GEMM once graphs are in use: what its documentation recommends for Hopper. Without a
// workspace of ours, cuBLAS takes one inside each capture (CUDA 12.2+: stream-ordered allocations in the graph).
constexpr size_t cublas_workspace_bytes = size_t{32} << 20;

}  // namespace

size_t cuda_backend::graph_reserve_bytes() const { return cublas_workspace_bytes; }

void cuda_backend::use_graph_scratch(bool on) {
  not_capturing("use_graph_scratch");
  if (on && cublas_workspace_.empty()) {
    make_current();
    ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // no GEMM queued may still use the default workspace
    cublas_workspace_ = alloc(dtype::i32, {static_cast<int64_t>(cublas_workspace_bytes / 4)});
    check_cublas(cublas().set_workspace(cublas_, cublas_workspace_.data(), cublas_workspace_bytes),
                 "cublasSetWorkspace");
  }
  scratch_ = on ? &graph_scratch_ : &eager_scratch_;
}

std::unique_ptr<op_graph> cuda_backend::capture_graph(const std::function<void()>& record) {
  not_capturing("capture_graph");
  make_current();
  ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  capturing_ = true;
  try {
    std::unique_ptr<op_graph> g = capture_stream(device_, stream_, record);
    capturing_ = false;
    return g;
  } catch (...) {
    capturing_ = false;
    throw;
  }
}

// ---- memory ------------------------------------------------------------------------------------------------------

tensor cuda_backend::alloc(dtype type, tensor_shape shape) {
  not_capturing("alloc");
  for (int i = 0; i < shape.n_dims; ++i)
    ACTORLLM_CHECK(shape[i] >= 0, fmt::format("alloc: negative dimension in {}", shape.to_string()).c_str());
  tensor t;
  t.type = type;
  t.shape = shape;
  t.buf = pool_->allocate(static_cast<size_t>(shape.numel()) * dtype_size(type));
  return t;
}

tensor cuda_backend::import_host(tensor host) {
  ACTORLLM_CHECK(host.where().kind == device_kind::cpu,
                 fmt::format("import_host: the tensor must be in host memory, got {}", host.describe()).c_str());
  tensor t = alloc(host.type, host.shape);
  upload(t, host.data(), host.nbytes());
  synchronize();  // the host copy may be dropped once this returns
  return t;
}

tensor cuda_backend::import_quantized_linear(const quantized_linear& w) {
  if (w.activations != activation_quant::none)
    return backend::import_quantized_linear(w);  // W8A8: refused by name there
  w.validate();
  if (!gemv_format_supported(w.bits, w.n_in, w.group_size))
    return backend::import_quantized_linear(w);  // groups of fewer or odd inputs: dequantized to bf16
  not_capturing("import_quantized_linear");
  const qgemv::gemv_layout layout = gemv_layout_of(w);
  const std::vector<uint8_t> image = pack_for_gemv(w, layout);
  make_current();
  std::shared_ptr<buffer> memory = pool_->allocate(image.size());
  ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(memory->data(), image.data(), image.size(), cudaMemcpyHostToDevice, stream_));
  ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host image is freed on return
  auto q = std::make_shared<quantized_weight>(std::move(memory), layout);
  tensor t;
  t.type = dtype::bf16;  // logical: the values are those of the dequantized weight
  t.shape = tensor_shape{w.n_out, w.n_in};
  t.layout = q->kind();
  t.buf = std::move(q);
  return t;
}

void cuda_backend::upload(const tensor& dst, const void* src, size_t bytes) {
  not_capturing("upload");
  checker{where()}.on_device(dst, "upload", "dst");
  ACTORLLM_CHECK(bytes <= dst.nbytes(),
                 fmt::format("upload: {} bytes do not fit {} ({} bytes)", bytes, dst.describe(), dst.nbytes()).c_str());
  if (bytes == 0)
    return;
  make_current();
  // From pageable memory the copy is staged before the call returns, so the caller may reuse `src` at once.
  ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, stream_));
}

void cuda_backend::download(const tensor& src, void* dst, size_t bytes) {
  not_capturing("download");
  checker{where()}.on_device(src, "download", "src");
  ACTORLLM_CHECK(bytes <= src.nbytes(),
                 fmt::format("download: {} bytes asked of {} ({} bytes)", bytes, src.describe(), src.nbytes()).c_str());
  make_current();
  if (bytes != 0)
    ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void cuda_backend::copy(const tensor& src, const tensor& dst) {
  const checker c{where()};
  c.on_device(dst, "copy", "dst");
  // src may also be host memory or another GPU's (a pipeline stage's hidden states): cudaMemcpyDefault finds out.
  ACTORLLM_CHECK(!src.empty() && src.offset + src.nbytes() <= src.buf->size(),
                 fmt::format("copy: src {} is empty or runs past its buffer", src.describe()).c_str());
  ACTORLLM_CHECK(src.nbytes() == dst.nbytes(),
                 fmt::format("copy: {} and {} differ in size", src.describe(), dst.describe()).c_str());
  if (same_start(src, dst) || src.nbytes() == 0)
    return;
  if (src.where() == dst.where())
    checker::disjoint(src, dst, "copy", "src and dst");
  else
    not_capturing("copy between devices");
  make_current();
  ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, stream_));
  if (src.where() != dst.where())
    ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the source's owner may reuse it once we return
}

void cuda_backend::synchronize() {
  not_capturing("synchronize");
  make_current();
  ACTORLLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- ops ---------------------------------------------------------------------------------------------------------

void cuda_backend::embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) {
  const int64_t n_embd = checker{where()}.embedding(ids, table, out);
  make_current();
  cuda::embedding(ids.data_as<int32_t>(), ids.numel(), table.data(), element_of(table.type), row_begin, table.dim(0),
                  n_embd, f32(out), stream_);
}

void cuda_backend::rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) {
  const int64_t width = checker{where()}.rms_norm(x, weight, out, dtype::bf16);
  make_current();
  cuda::rms_norm(f32(x), x.numel() / width, width, weight.data(), element_of(weight.type), eps, out.data(),
                 element_of(out.type), stream_);
}

void cuda_backend::add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                                const tensor& out) {
  const int64_t width = checker{where()}.add_rms_norm(residual, delta, weight, out, dtype::bf16), n = residual.numel();
  make_current();
  cuda::add_rms_norm(f32(residual), f32(delta), n / width, width, weight.data(), element_of(weight.type), eps,
                     out.data(), element_of(out.type), stream_);
}

dtype cuda_backend::matmul_input_type(const tensor& w) const {
  return w.type == dtype::bf16 && w.layout == tensor_layout::row_major ? dtype::bf16 : dtype::f32;
}

dtype cuda_backend::checked_input_type(const tensor& x, const tensor& w, const char* op) const {
  ACTORLLM_CHECK(x.type == dtype::f32 || x.type == matmul_input_type(w),
                 fmt::format("{}: x {} must be f32 or the weight's input type {} (w {})", op, x.describe(),
                             dtype_name(matmul_input_type(w)), w.describe())
                     .c_str());
  return x.type;
}

const void* cuda_backend::gemm_input(const tensor& x, element_type type) {
  if (type == element_type::f32 || x.type != dtype::f32)
    return x.data();  // f32 weights, or x already in the weights' type (checked_input_type)
  // Reduced-precision weights: the input is rounded to their type, into scratch that lives until the next op.
  void* converted =
      scratch(scratch_->gemm_input, static_cast<size_t>(x.numel()) * static_cast<size_t>(element_size(type)));
  convert_from_f32(f32(x), x.numel(), converted, type, stream_);
  return converted;
}

void cuda_backend::linear_on(const void* input, const checker::linear_dims& d, const tensor& w, const tensor& bias,
                             const tensor& y) {
  linear(cublas_, linear_gemm_args(d.n_tokens, d.n_in, d.n_out), w.data(), input, element_of(w.type), f32(y));
  if (!bias.empty())
    cuda::add(f32(y), f32(bias), y.numel(), d.n_out, f32(y), stream_);
}

void cuda_backend::quantized_matmul(const tensor& x, const checker::linear_dims& d, const tensor& w, const tensor& bias,
                                    const tensor& y) {
  const quantized_weight& q = quantized_weight_of(w);
  if (d.n_tokens == 0 || d.n_out == 0)
    return;
  const qgemv::weight_view view = q.view();
  const float* b = bias.empty() ? nullptr : f32(bias);
  if (d.n_tokens <= int64_t{qgemv::max_tokens} * qgemv::max_gemv_passes) {
    const float* input = f32(x);
    if (reinterpret_cast<uintptr_t>(input) % 16 != 0) {  // the kernel reads x four floats at a time
      void* aligned = scratch(scratch_->gemm_input, x.nbytes());
      ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(aligned, input, x.nbytes(), cudaMemcpyDeviceToDevice, stream_));
      input = static_cast<const float*>(aligned);
    }
    const qgemv::gemv_launch launch = plan_quantized_gemv(q.layout(), sm_count_);
    for (int64_t first = 0; first < d.n_tokens; first += qgemv::max_tokens)  // up to 8 rows of x per pass
      quantized_gemv(view, launch, input + first * d.n_in, std::min<int64_t>(qgemv::max_tokens, d.n_tokens - first), b,
                     f32(y) + first * d.n_out, stream_);
    return;
  }
  // Prefill: x rounded to bf16 once, the weight dequantized to bf16 a chunk of rows at a time into scratch of a
  // bounded size, each chunk's outputs (a column block of y) by cuBLAS.
  const void* input = gemm_input(x, element_type::bf16);
  const int64_t chunk_rows = dequant_chunk_rows(q.layout());
  void* rows = scratch(scratch_->dequantized_weight, static_cast<size_t>(chunk_rows * d.n_in) * 2, true);
  for (int64_t first = 0; first < d.n_out; first += chunk_rows) {
    const int64_t n = std::min(chunk_rows, d.n_out - first);
    dequantize_rows(view, first, n, rows, stream_);
    linear(cublas_, linear_rows_gemm_args(d.n_tokens, d.n_in, n, d.n_out), rows, input, element_type::bf16,
           f32(y) + first);
  }
  if (b != nullptr)
    cuda::add(f32(y), b, y.numel(), d.n_out, f32(y), stream_);
}

void cuda_backend::matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) {
  const bool quantized = is_quantized_weight(w);
  const checker::linear_dims d = checker{where()}.matmul(x, w, bias, y, quantized, checked_input_type(x, w, "matmul"));
  make_current();
  if (quantized) {
    quantized_matmul(x, d, w, bias, y);
  } else if (gemv_takes(x, w, d.n_tokens, d.n_in)) {
    if (d.n_out > 0) {
      const gemv_output o{w.data(), bias.empty() ? nullptr : f32(bias), f32(y), d.n_out};
      gemv_linear(&o, 1, x.data(), is_bf16(x), d.n_tokens, d.n_in, stream_);
    }
  } else {
    linear_on(gemm_input(x, element_of(w.type)), d, w, bias, y);
  }
}

void cuda_backend::matmul_group(const tensor& x, std::span<const linear_out> outs) {
  ACTORLLM_CHECK(outs.size() <= 8, "matmul_group: at most 8 outputs");
  const checker c{where()};
  if (std::any_of(outs.begin(), outs.end(), [](const linear_out& o) { return is_quantized_weight(o.w); })) {
    for (size_t i = 0; i < outs.size(); ++i) {
      c.matmul(x, outs[i].w, outs[i].bias, outs[i].y, is_quantized_weight(outs[i].w));
      for (size_t j = 0; j < i; ++j)
        checker::disjoint(outs[i].y, outs[j].y, "matmul_group", "two outputs");
    }
    for (const linear_out& o : outs)
      matmul(x, o.w, o.bias, o.y);
    return;
  }
  std::array<checker::linear_dims, 8> dims{};
  for (size_t i = 0; i < outs.size(); ++i) {
    dims[i] = c.matmul(x, outs[i].w, outs[i].bias, outs[i].y, false, checked_input_type(x, outs[i].w, "matmul_group"));
    ACTORLLM_CHECK(outs[i].w.type == outs[0].w.type, fmt::format("matmul_group: weights {} and {} differ in type",
                                                                 outs[0].w.describe(), outs[i].w.describe())
                                                         .c_str());
    for (size_t j = 0; j < i; ++j)
      checker::disjoint(outs[i].y, outs[j].y, "matmul_group", "two outputs");
  }
  if (outs.empty())
    return;
  make_current();
  if (std::all_of(outs.begin(), outs.end(),
                  [&](const linear_out& o) { return gemv_takes(x, o.w, dims[0].n_tokens, dims[0].n_in); })) {
    // One launch per gemv::max_outputs weights (q, k and v together), x read as it is.
    for (size_t first = 0; first < outs.size(); first += gemv::max_outputs) {
      std::array<gemv_output, gemv::max_outputs> group{};
      const size_t n = std::min<size_t>(gemv::max_outputs, outs.size() - first);
      for (size_t i = 0; i < n; ++i) {
        const linear_out& o = outs[first + i];
        group[i] = gemv_output{o.w.data(), o.bias.empty() ? nullptr : f32(o.bias), f32(o.y), dims[first + i].n_out};
      }
      gemv_linear(group.data(), static_cast<int>(n), x.data(), is_bf16(x), dims[0].n_tokens, dims[0].n_in, stream_);
    }
    return;
  }
  const void* input = gemm_input(x, element_of(outs[0].w.type));
  for (size_t i = 0; i < outs.size(); ++i)
    linear_on(input, dims[i], outs[i].w, outs[i].bias, outs[i].y);
}

void cuda_backend::matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                                    const tensor& out) {
  const checker c{where()};
  const bool quantized = is_quantized_weight(w_gate) || is_quantized_weight(w_up);
  // Both weights checked against up (f32 [n, n_ff]); out is up's size in f32 or bf16 (the down GEMM's input).
  const checker::linear_dims d =
      c.matmul(x, w_up, tensor{}, up, is_quantized_weight(w_up), checked_input_type(x, w_up, "matmul_silu_gate"));
  c.matmul(x, w_gate, tensor{}, up, is_quantized_weight(w_gate), checked_input_type(x, w_gate, "matmul_silu_gate"));
  ACTORLLM_CHECK(
      w_gate.shape == w_up.shape && (quantized || w_gate.type == w_up.type),
      fmt::format("matmul_silu_gate: w_gate {} and w_up {} differ", w_gate.describe(), w_up.describe()).c_str());
  c.activation(out, dtype::bf16, "matmul_silu_gate", "out");
  checker::numel(out, up.numel(), "matmul_silu_gate", "out");
  checker::disjoint(up, out, "matmul_silu_gate", "up and out");
  checker::disjoint(x, out, "matmul_silu_gate", "x and out");
  make_current();
  // Any size: gate and up through the GEMV's SiLU epilogue read at 90% of copy bandwidth at one row (H200, the 8B's
  // 4096 -> 14336 pair), where cuBLAS's stacked 4096 -> 28672 read at 88% before its separate SiLU.
  if (!quantized && gemv_takes(x, w_gate, d.n_tokens, d.n_in, true) && gemv_takes(x, w_up, d.n_tokens, d.n_in, true)) {
    if (d.n_out > 0)  // gate, up and their SiLU×mul in one launch; `up` is not needed
      gemv_silu_gate(w_gate.data(), w_up.data(), d.n_out, x.data(), is_bf16(x), d.n_tokens, d.n_in, out.data(),
                     is_bf16(out), stream_);
    return;
  }
  // The gate's f32 product: in out itself when out is f32 (silu_mul then works in place), else in scratch.
  tensor gate = out;
  if (out.type != dtype::f32) {
    scratch(scratch_->gate_product, up.nbytes());
    gate = scratch_->gate_product;
    gate.type = dtype::f32;
    gate.shape = up.shape;
  }
  if (quantized) {
    matmul(x, w_gate, tensor{}, gate);
    matmul(x, w_up, tensor{}, up);
  } else {
    const void* input = gemm_input(x, element_of(w_gate.type));
    linear_on(input, d, w_gate, tensor{}, gate);
    linear_on(input, d, w_up, tensor{}, up);
  }
  silu_mul(gate, up, out);
}

rope_table cuda_backend::make_rope_table(const rope_config& cfg) {
  const std::vector<float> inv = cpu::rope_inv_freq(cfg);  // the CPU's frequencies exactly (scaling included)
  rope_table t;
  t.head_dim = cfg.head_dim;
  t.inv_freq = alloc(dtype::f32, {static_cast<int64_t>(inv.size())});
  upload(t.inv_freq, inv.data(), inv.size() * sizeof(float));
  synchronize();
  return t;
}

namespace {

// The one weight type the rope kernel normalises q and k heads with (f32 when there are no norms).
element_type rope_norm_type(const tensor& k, const tensor& q_norm, const tensor& k_norm) {
  ACTORLLM_CHECK(q_norm.empty() == k_norm.empty() || k.empty(),
                 "rope: q_norm and k_norm come together (Qwen3) or not at all");
  ACTORLLM_CHECK(
      q_norm.empty() || k_norm.empty() || k_norm.type == q_norm.type,
      fmt::format("rope: q_norm {} and k_norm {} must share a type", q_norm.describe(), k_norm.describe()).c_str());
  return !q_norm.empty() ? element_of(q_norm.type) : (!k_norm.empty() ? element_of(k_norm.type) : element_type::f32);
}

}  // namespace

void cuda_backend::rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                        const tensor& q_norm, const tensor& k_norm, float eps) {
  const checker::rope_dims d = checker{where()}.rope(table, positions, q, k, q_norm, k_norm);
  if (d.n_tokens == 0)
    return;
  const element_type norm_type = rope_norm_type(k, q_norm, k_norm);
  make_current();
  cuda::rope(f32(table.inv_freq), d.head_dim, positions.data_as<int32_t>(), d.n_tokens, f32(q), d.n_head,
             k.empty() ? nullptr : f32(k), d.n_head_kv, q_norm.empty() ? nullptr : q_norm.data(),
             k_norm.empty() ? nullptr : k_norm.data(), norm_type, eps, stream_);
}

namespace {

// The cache as the kernels take it (its shape checked by backend_checks::kv_cache).
paged_cache_view cache_view(const kv_layer& cache) {
  ACTORLLM_CHECK(!cache.heads_outer, "the CUDA kernels read a KV cache laid out slot by slot, not kv heads outer");
  kv_element type = kv_element::f32;
  switch (cache.k.type) {
    case dtype::f16:
      type = kv_element::f16;
      break;
    case dtype::bf16:
      type = kv_element::bf16;
      break;
    case dtype::fp8_e4m3:
      type = kv_element::fp8_e4m3;
      break;
    default:  // f32 (the checks refused every other type)
      break;
  }
  return paged_cache_view{cache.k.data(),   cache.v.data(), cache.n_blocks(), cache.block_size(), cache.n_head_kv(),
                          cache.head_dim(), type,           cache.k_scale,    cache.v_scale};
}

}  // namespace

void cuda_backend::write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) {
  checker{where()}.write_kv(cache, k, v, batch);
  make_current();
  cuda::write_kv(cache_view(cache), f32(k), f32(v), batch.slots.data_as<int64_t>(), batch.n_tokens, stream_);
}

void cuda_backend::rope_write_kv(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                                 const tensor& q_norm, const tensor& k_norm, float eps, const kv_layer& cache,
                                 const tensor& v, const attention_batch& batch) {
  const checker c{where()};
  const checker::rope_dims d = c.rope(table, positions, q, k, q_norm, k_norm);
  if (k.empty() || d.n_tokens != batch.n_tokens) {  // the two ops, whose checks name what is wrong
    backend::rope_write_kv(table, positions, q, k, q_norm, k_norm, eps, cache, v, batch);
    return;
  }
  c.write_kv(cache, k, v, batch);
  if (d.n_tokens == 0)
    return;
  const element_type norm_type = rope_norm_type(k, q_norm, k_norm);
  const paged_cache_view view = cache_view(cache);
  make_current();
  cuda::rope_write_kv(f32(table.inv_freq), d.head_dim, positions.data_as<int32_t>(), d.n_tokens, f32(q), d.n_head,
                      f32(k), d.n_head_kv, q_norm.empty() ? nullptr : q_norm.data(),
                      k_norm.empty() ? nullptr : k_norm.data(), norm_type, eps, view, f32(v),
                      batch.slots.data_as<int64_t>(), stream_);
}

void cuda_backend::paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                                   int64_t window, const tensor& out) {
  const checker c{where()};
  attend(q, batch, cache, scale, window, out, c.paged_attention(q, batch, cache, out), nullptr);
}

void cuda_backend::paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache,
                                           float scale, int64_t window, const tensor& out, const tensor& lse) {
  const checker c{where()};
  attend(q, batch, cache, scale, window, out, c.paged_attention_partial(q, batch, cache, out, lse), f32(lse));
}

void cuda_backend::merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts,
                                            int64_t head_begin, const tensor& out) {
  const int64_t n_head_all = checker{where()}.merge_attention_partials(parts, lses, n_parts, head_begin, out);
  make_current();
  cuda::merge_attention_partials(f32(parts), f32(lses), n_parts, out.dim(0), n_head_all, head_begin, out.dim(1),
                                 out.dim(2), f32(out), stream_);
}

void cuda_backend::attend(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                          int64_t window, const tensor& out, int64_t n_head, float* lse) {
  const checker c{where()};
  const paged_cache_view view = cache_view(cache);
  const int64_t n_tokens = batch.n_tokens, hd = view.head_dim;
  if (n_tokens == 0)
    return;
  if (batch.n_seqs == 0)
    return;
  c.on_device(batch.seqs, dtype::i32, "paged_attention", "batch.seqs");
  c.on_device(batch.block_tables, dtype::i32, "paged_attention", "batch.block_tables");
  if (hd <= small_head_dim_max) {  // heads narrower than a warp (toy models): the simple kernel
    make_current();
    paged_attention_small_heads(f32(q), batch.positions.data_as<int32_t>(), batch.seqs.data_as<int32_t>(), batch.n_seqs,
                                batch.block_tables.data_as<int32_t>(), view, n_tokens, n_head, scale, window, f32(out),
                                stream_, batch.kv_layout, lse);
    return;
  }
  attention_geometry g;
  g.n_tokens = n_tokens;
  g.n_head = n_head;
  g.n_head_kv = view.n_head_kv;
  g.head_dim = hd;
  g.block_size = view.block_size;
  g.window = window;
  device_limits limits;
  limits.sm_count = sm_count_;
  attention_plan plan;
  try {
    plan = plan_paged_attention(g, batch.host_seqs.data(), batch.n_seqs,
                                static_cast<int64_t>(batch.host_block_tables.size()), limits);
  } catch (const std::invalid_argument& e) {
    ACTORLLM_CHECK(false, fmt::format("paged_attention: {}", e.what()).c_str());
  }
  // Prefill chunks of a 16-bit or fp8 cache go to the tensor-core kernel; the per-row kernel takes the other rows.
  const int64_t prefill_tiles = cuda::prefill_attention_applies(view.type, hd, batch.kv_layout, lse != nullptr)
                                    ? cuda::prefill_attention_max_tiles(batch.host_seqs.data(), batch.n_seqs)
                                    : 0;
  if (prefill_tiles > 0)
    plan.rows_fused_from = cuda::prefill::min_rows;
  void* workspace = plan.workspace_bytes > 0
                        ? scratch(scratch_->attention_workspace, static_cast<size_t>(plan.workspace_bytes))
                        : nullptr;
  make_current();
  cuda::paged_attention(plan, f32(q), batch.positions.data_as<int32_t>(), batch.seqs.data_as<int32_t>(),
                        batch.block_tables.data_as<int32_t>(), view, scale, f32(out), workspace, stream_,
                        batch.kv_layout, lse);
  if (prefill_tiles > 0)
    cuda::prefill_attention(f32(q), batch.positions.data_as<int32_t>(), batch.seqs.data_as<int32_t>(), batch.n_seqs,
                            prefill_tiles, batch.block_tables.data_as<int32_t>(), view, n_head, scale, window, f32(out),
                            stream_);
}

void cuda_backend::silu_mul(const tensor& gate, const tensor& up, const tensor& out) {
  checker{where()}.silu_mul(gate, up, out, dtype::bf16);
  make_current();
  cuda::silu_mul(f32(gate), f32(up), gate.numel(), out.data(), element_of(out.type), stream_);
}

void cuda_backend::silu_mul_stacked(const tensor& gate_up, const tensor& out) {
  const int64_t ff = checker{where()}.silu_mul_stacked(gate_up, out);
  make_current();
  cuda::silu_mul_stacked(f32(gate_up), out.dim(0), ff, out.data(), element_of(out.type), stream_);
}

void cuda_backend::add(const tensor& a, const tensor& b, const tensor& out) {
  const checker c{where()};
  c.on_device(a, dtype::f32, "add", "a");
  c.on_device(b, dtype::f32, "add", "b");
  c.on_device(out, dtype::f32, "add", "out");
  const int64_t n = a.numel(), width = a.row_size();
  checker::numel(out, n, "add", "out");
  const bool full = b.numel() == n;
  ACTORLLM_CHECK(full || b.numel() == width,
                 fmt::format("add: b {} is neither a's shape nor one row of a {}", b.describe(), a.describe()).c_str());
  if (!same_start(out, a))
    checker::disjoint(out, a, "add", "out and a (unless equal)");
  if (!same_start(out, b))
    checker::disjoint(out, b, "add", "out and b (unless equal)");
  make_current();
  cuda::add(f32(a), f32(b), n, full ? n : width, f32(out), stream_);
}

void cuda_backend::gather_rows(const tensor& x, const tensor& rows, const tensor& out) {
  const int64_t width = checker{where()}.gather_rows(x, rows, out), m = rows.numel();
  make_current();
  cuda::gather_rows(f32(x), x.rows(), width, rows.data_as<int32_t>(), m, f32(out), stream_);
}

void cuda_backend::lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots,
                            const tensor& shrunk, const tensor& y) {
  const backend_checks::lora_dims d = checker{where()}.lora_add(x, a, b, row_slots, shrunk, y);
  // The slots stay on the device (reading them here would synchronise and break graph capture): the kernels skip a
  // row whose slot lies outside the stack, where the CPU backend refuses it.
  ACTORLLM_CHECK(d.n * d.rank <= max_grid_x,
                 fmt::format("lora_add: {} rows x rank {} exceed one launch's grid", d.n, d.rank).c_str());
  make_current();
  cuda::lora_add(f32(x), f32(a), f32(b), row_slots.data_as<int32_t>(),
                 cuda::lora_dims{d.n, d.n_in, d.n_out, d.n_slots, d.rank}, f32(shrunk), f32(y), stream_);
}

void cuda_backend::split_columns(const tensor& src, std::span<const tensor> dsts) {
  checker{where()}.split_columns(src, dsts);
  cuda::split::parts p{};
  for (const tensor& d : dsts) {
    p.dst[p.n] = f32(d);
    p.cols[p.n] = d.dim(1);
    p.total += d.dim(1);
    ++p.n;
  }
  if (p.total == 0 || src.dim(0) == 0)
    return;
  make_current();
  cuda::split_columns(f32(src), src.dim(0), src.dim(1), p, stream_);
}

void cuda_backend::copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col,
                                int64_t n_cols) {
  checker{where()}.copy_columns(src, src_col, dst, dst_col, n_cols);
  if (n_cols == 0 || src.dim(0) == 0)
    return;
  make_current();
  const size_t spitch = static_cast<size_t>(src.dim(1)) * sizeof(float),
               dpitch = static_cast<size_t>(dst.dim(1)) * sizeof(float);
  const float* from = f32(src) + src_col;
  tensor staged;
  if (tensors_overlap(src,
                      dst)) {  // cudaMemcpy2D does not allow overlap (the CPU's memmove does): copy src aside first
    staged = alloc(dtype::f32, src.shape);
    ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(staged.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    from = f32(staged) + src_col;
  }
  ACTORLLM_CUDA_CHECK(cudaMemcpy2DAsync(f32(dst) + dst_col, dpitch, from, spitch,
                                        static_cast<size_t>(n_cols) * sizeof(float), static_cast<size_t>(src.dim(0)),
                                        cudaMemcpyDeviceToDevice, stream_));
}

void cuda_backend::sample(const tensor& logits, std::span<const ops::sample_row> rows,
                          std::span<ops::sample_result> out) {
  not_capturing("sample");
  checker{where()}.on_device(logits, dtype::f32, "sample", "logits");
  const auto n = static_cast<int64_t>(rows.size());
  ACTORLLM_CHECK(logits.shape.n_dims == 2 && logits.dim(0) == n,
                 fmt::format("sample: logits {} must be [{}, n_vocab]", logits.describe(), n).c_str());
  ACTORLLM_CHECK(out.size() == rows.size(),
                 fmt::format("sample: {} results for {} rows", out.size(), rows.size()).c_str());
  for (const ops::sample_row& r : rows)
    ACTORLLM_CHECK(r.params != nullptr && r.rng != nullptr, "sample: a row without params or generator");
  const int64_t n_vocab = logits.dim(1);
  if (n == 0)
    return;
  // On the device, one block per row (kernels/cuda/sampling.cu); the host prepares what depends only on ids and takes
  // the draws from the rows' generators in row order, as cpu::sample would, so the random streams stay the CPU's.
  // Only the descriptors go up and the per-row results (token, raw statistics, top-n) come back.
  sampling::sample_plan plan(rows, n_vocab);
  make_current();
  auto* input = static_cast<std::byte*>(scratch(sample_input_, plan.input().size()));
  auto* output = static_cast<std::byte*>(scratch(sample_output_, plan.output_bytes()));
  float* work = plan.work_floats() == 0
                    ? nullptr
                    : static_cast<float*>(scratch(sample_work_, plan.work_floats() * sizeof(float)));
  host_sample_output_.resize((plan.output_bytes() + 7) / 8);
  const std::span<std::byte> host_output(reinterpret_cast<std::byte*>(host_sample_output_.data()), plan.output_bytes());
  const sampling::batch_view view = plan.view(f32(logits), input, output, work);
  for (int run = 0;; ++run) {
    upload(sample_input_, plan.input().data(), plan.input().size());
    sample_rows(view, n, stream_);
    download(sample_output_, host_output.data(), host_output.size());  // waits for the stream
    // A row that could not draw (every logit -inf after its processors) gives its draw back; only when it shares a
    // generator with a later row do that row's draws change, and the batch runs once more with them.
    if (!plan.settle_draws(host_output))
      break;
    ACTORLLM_CHECK(run == 0, "sample: the draws did not settle after a second run");
  }
  plan.results(host_output, out);
}

}  // namespace actorllm::cuda
