// Checks, sizes and the round-to-nearest quantizer of the canonical quantized Linear weight.
#include "kernels/quantized_linear.hpp"

#include "kernels/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace actorllm {

const char* activation_quant_name(activation_quant a) {
  switch (a) {
    case activation_quant::none:
      return "none";
    case activation_quant::int8_per_token:
      return "int8_per_token";
  }
  return "?";
}

void quantized_linear::validate() const {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format("quantized weight {}: {}", describe(), what));
  };
  if (bits != 4 && bits != 8)
    fail(fmt::format("bits must be 4 or 8, got {}", bits));
  if (n_out <= 0 || n_in <= 0)
    fail("n_out and n_in must be positive");
  if (group_size <= 0 || n_in % group_size != 0)
    fail(fmt::format("group_size {} does not divide n_in {}", group_size, n_in));
  const auto n_codes = static_cast<size_t>(n_out * n_in);
  const auto n_scales = static_cast<size_t>(n_out * n_groups());
  if (codes.size() != n_codes)
    fail(fmt::format("{} codes, expected {}", codes.size(), n_codes));
  if (scales.size() != n_scales || zeros.size() != n_scales)
    fail(fmt::format("{} scales and {} zeros, expected {} each", scales.size(), zeros.size(), n_scales));
  const int limit = 1 << bits;
  if (bits < 8) {
    if (std::any_of(codes.begin(), codes.end(), [&](uint8_t c) { return c >= limit; }))
      fail(fmt::format("a code is {} or more", limit));
    if (std::any_of(zeros.begin(), zeros.end(), [&](uint8_t z) { return z > limit; }))
      fail(fmt::format("a zero point is above {}", limit));
  }
  if (std::any_of(scales.begin(), scales.end(), [](float s) { return !std::isfinite(s); }))
    fail("a scale is not finite");
  if (activations == activation_quant::int8_per_token) {
    if (bits != 8)
      fail("int8 activations need 8-bit weights");
    if (std::any_of(zeros.begin(), zeros.end(), [](uint8_t z) { return z != 128; }))
      fail("int8 activations need symmetric weights (every zero point 128)");
  }
}

size_t quantized_linear::packed_bytes() const {
  const auto n = static_cast<size_t>(n_out * n_in);
  return (bits == 4 ? (n + 1) / 2 : n) + static_cast<size_t>(n_out * n_groups()) * (sizeof(float) + 1);
}

std::string quantized_linear::describe() const {
  const std::string group = group_size == n_in ? "per-channel" : fmt::format("g{}", group_size);
  return fmt::format("int{} {}{} [{}, {}]", bits, group, activations == activation_quant::int8_per_token ? " W8A8" : "",
                     n_out, n_in);
}

quantized_linear quantize_linear_rtn(const float* w, int64_t n_out, int64_t n_in, int bits, int64_t group_size,
                                     bool symmetric) {
  quantized_linear q;
  q.bits = bits;
  q.n_out = n_out;
  q.n_in = n_in;
  q.group_size = group_size == 0 ? n_in : group_size;
  if ((bits != 4 && bits != 8) || n_out <= 0 || n_in <= 0 || q.group_size <= 0 || n_in % q.group_size != 0)
    throw std::invalid_argument(
        fmt::format("quantize_linear_rtn: bits {} group {} for [{}, {}]", bits, group_size, n_out, n_in));
  const int64_t n_groups = q.n_groups();
  q.codes.resize(static_cast<size_t>(n_out * n_in));
  q.scales.resize(static_cast<size_t>(n_out * n_groups));
  q.zeros.resize(static_cast<size_t>(n_out * n_groups));
  const int max_code = (1 << bits) - 1;
  const int mid = 1 << (bits - 1);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t g = 0; g < n_groups; ++g) {
      const float* src = w + o * n_in + g * q.group_size;
      const auto [lo_it, hi_it] = std::minmax_element(src, src + q.group_size);
      const float lo = std::min(*lo_it, 0.0f);
      const float hi = std::max(*hi_it, 0.0f);
      float scale = 0;
      int zero = 0;
      if (symmetric) {
        scale = std::max(-lo, hi) / static_cast<float>(mid - 1);
        zero = mid;
      } else {
        scale = (hi - lo) / static_cast<float>(max_code);
        zero = scale > 0 ? static_cast<int>(std::lround(-lo / scale)) : 0;
      }
      if (!(scale > 0))
        scale = 1;
      const auto gi = static_cast<size_t>(o * n_groups + g);
      q.scales[gi] = scale;
      q.zeros[gi] = static_cast<uint8_t>(std::clamp(zero, 0, max_code));
      for (int64_t i = 0; i < q.group_size; ++i) {
        const long c = std::lround(src[i] / scale) + q.zeros[gi];
        q.codes[static_cast<size_t>(o * n_in + g * q.group_size + i)] =
            static_cast<uint8_t>(std::clamp<long>(c, 0, max_code));
      }
    }
  return q;
}

tensor dequantize_to_bf16(const quantized_linear& w) {
  w.validate();
  tensor t = make_host_tensor(dtype::bf16, {w.n_out, w.n_in});
  auto* out = t.data_as<uint16_t>();
  for (int64_t o = 0; o < w.n_out; ++o)
    for (int64_t i = 0; i < w.n_in; ++i)
      out[o * w.n_in + i] = f32_to_bf16(w.dequantized(o, i));
  return t;
}

}  // namespace actorllm
