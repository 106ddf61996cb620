// Token embedding lookup.
#include "kernels/cpu/embedding.hpp"

#include <algorithm>

#include "kernels/cpu/convert.hpp"

namespace actorllm::cpu {

void embedding(const int32_t* ids, int64_t n_tokens, const void* table, dtype ttype, int64_t row_begin, int64_t n_rows,
               int64_t n_embd, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(table);
  size_t row_bytes = static_cast<size_t>(n_embd) * dtype_size(ttype);
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t row = static_cast<int64_t>(ids[t]) - row_begin;
    float* dst = out + t * n_embd;
    if (row >= 0 && row < n_rows)
      convert_to_f32(bytes + static_cast<size_t>(row) * row_bytes, ttype, n_embd, dst);
    else
      std::fill(dst, dst + n_embd, 0.0f);
  }
}

}  // namespace actorllm::cpu
