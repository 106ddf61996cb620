// The backend interface's default implementations.
#include "kernels/backend.hpp"

#include "kernels/quantized_linear.hpp"

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorllm {

tensor backend::import_quantized_linear(const quantized_linear& w) {
  if (w.activations != activation_quant::none)
    throw std::runtime_error("import_quantized_linear: " + describe() + " has no kernels for " + w.describe() +
                             " (activations quantized to int8); weight-only formats run everywhere");
  return import_linear_weight(dequantize_to_bf16(w));
}

tensor backend::find_quantized_linear(const quantized_linear&) { return {}; }

namespace {

// The rows of `parts` together: [sum rows_i, n_in], after checking they stack.
tensor_shape stacked_shape(std::span<const tensor> parts) {
  if (parts.empty())
    throw std::invalid_argument("import_stacked_linear_weight: no parts");
  const tensor& first = parts.front();
  int64_t rows = 0;
  for (const tensor& p : parts) {
    if (p.shape.n_dims != 2 || p.type != first.type || p.shape[1] != first.shape[1] ||
        p.layout != tensor_layout::row_major || p.where().kind != device_kind::cpu)
      throw std::invalid_argument("import_stacked_linear_weight: " + p.describe() + " does not stack with " +
                                  first.describe() + " (host, row-major [rows, n_in] of one dtype and n_in)");
    rows += p.shape[0];
  }
  return tensor_shape{rows, first.shape[1]};
}

}  // namespace

tensor backend::import_stacked_linear_weight(std::span<const tensor> parts) {
  const tensor_shape shape = stacked_shape(parts);
  tensor stacked = make_host_tensor(parts.front().type, shape);
  auto* dst = static_cast<std::byte*>(stacked.data());
  for (const tensor& p : parts) {
    if (p.nbytes() != 0)
      std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return import_linear_weight(std::move(stacked));
}

}  // namespace actorllm
