// The backend interface's default implementations.
#include "kernels/backend.hpp"

#include "kernels/quantized_linear.hpp"

#include <stdexcept>
#include <string>

namespace actorllm {

tensor backend::import_quantized_linear(const quantized_linear& w) {
  if (w.activations != activation_quant::none)
    throw std::runtime_error("import_quantized_linear: " + describe() + " has no kernels for " + w.describe() +
                             " (activations quantized to int8); weight-only formats run everywhere");
  return import_linear_weight(dequantize_to_bf16(w));
}

}  // namespace actorllm
