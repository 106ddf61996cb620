// make_backend: the one place that knows which backends this build has.
#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#ifdef ACTORLLM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif

#include <stdexcept>
#include <string>

namespace actorllm {

tensor backend::import_quantized_linear(const quantized_linear& w) {
  if (w.activations != activation_quant::none)
    throw std::runtime_error("import_quantized_linear: " + describe() + " has no kernels for " + w.describe() +
                             " (activations quantized to int8); weight-only formats run everywhere");
  return import_linear_weight(dequantize_to_bf16(w));
}

std::unique_ptr<backend> make_backend(device where, int n_threads) {
  switch (where.kind) {
    case device_kind::cpu:
      return std::make_unique<cpu::cpu_backend>(n_threads);
    case device_kind::cuda:
#ifdef ACTORLLM_HAVE_CUDA
      return std::make_unique<cuda::cuda_backend>(where.index);
#else
      break;
#endif
  }
  throw std::runtime_error("make_backend: device '" + where.to_string() +
                           "': this build has no CUDA backend (built without nvcc); the only device is 'cpu'");
}

std::unique_ptr<backend> make_backend(device_kind kind, int n_threads) {
  return make_backend(device{kind, 0}, n_threads);
}

}  // namespace actorllm
