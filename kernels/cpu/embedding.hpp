// Token embedding lookup, vocab-parallel aware.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"

namespace actorllm::cpu {

/// out[t] = table[ids[t] - row_begin] (converted to f32) when row_begin <= ids[t] < row_begin + n_rows, else zeros.
/// A vocab-parallel shard holds rows [row_begin, row_begin + n_rows) of the full table; summing the shards'
/// outputs (the TP all-reduce) gives the full lookup. table: [n_rows, n_embd] of type `ttype`; out: [n_tokens,
/// n_embd] f32.
void embedding(const int32_t* ids, int64_t n_tokens, const void* table, dtype ttype, int64_t row_begin, int64_t n_rows,
               int64_t n_embd, float* out);

}  // namespace actorllm::cpu
