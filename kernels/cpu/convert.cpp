// Bulk element-type conversion.
#include "kernels/cpu/convert.hpp"
#include "util/check.hpp"

#include <cstring>

#include "kernels/cpu/simd.hpp"

namespace actorllm::cpu {
namespace {

template <dtype D>
void to_f32(const void* src, int64_t n, float* dst) {
  constexpr int w = simd::width;
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(dst + i, simd::load_as<D>(src, i));
  for (; i < n; ++i)
    dst[i] = load_as_f32(src, D, static_cast<size_t>(i));
}

}  // namespace

void convert_to_f32(const void* src, dtype stype, int64_t n, float* dst) {
  if (n <= 0)
    return;  // also keeps null pointers of empty buffers away from memcpy
  switch (stype) {
    case dtype::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case dtype::f16:
      to_f32<dtype::f16>(src, n, dst);
      return;
    case dtype::bf16:
      to_f32<dtype::bf16>(src, n, dst);
      return;
    case dtype::i32:
    case dtype::i64:
      ACTORLLM_CHECK(false, "convert_to_f32: integer types hold no weights or activations");
  }
}

void convert_from_f32(const float* src, int64_t n, dtype dtype_out, void* dst) {
  if (n <= 0)
    return;
  if (dtype_out == dtype::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  // Not on a hot path (the engine stores activations and the KV cache as f32), so the portable scalar
  // conversions are used; they define the rounding.
  for (int64_t i = 0; i < n; ++i)
    store_from_f32(dst, dtype_out, static_cast<size_t>(i), src[i]);
}

}  // namespace actorllm::cpu
