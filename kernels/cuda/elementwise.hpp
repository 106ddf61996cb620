// Elementwise and row-copy kernels of the backend (device pointers, f32 activations): SiLU×mul, add with an optional
// row broadcast, row gather, and the f32 -> f16/bf16 conversion the reduced-precision GEMMs read their input in.
#pragma once

#include "kernels/cuda/element_type.hpp"
#include "kernels/cuda/stacked_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// out[i] = silu(gate[i]) * up[i] = gate[i] * up[i] / (1 + exp(-gate[i])), out of out_type: f32 (which may be gate or
/// up) or bf16 (rounded once, for the GEMM that reads it; apart from both).
void silu_mul(const float* gate, const float* up, int64_t n, void* out, element_type out_type, cudaStream_t stream);

/// out[r, j] = silu(gate_up[r, j]) * gate_up[r, n_ff + j] for r < n_rows, j < n_ff (a stacked gate|up output, rows of
/// 2 * n_ff floats; stacked_math.hpp), in f32 or rounded once to bf16 (out_type). out must not overlap gate_up.
void silu_mul_stacked(const float* gate_up, int64_t n_rows, int64_t n_ff, void* out, element_type out_type,
                      cudaStream_t stream);

/// The first p.total columns of each of src's n_rows rows (src_width floats each) into the parts' own rows, in one
/// launch (stacked_math.hpp's split::locate). No part overlaps src.
void split_columns(const float* src, int64_t n_rows, int64_t src_width, const split::parts& p, cudaStream_t stream);

/// out[i] = a[i] + b[i % b_n] for i < n, where b_n is n (elementwise) or a row width dividing n (a bias added to
/// every row). out may be a or b.
void add(const float* a, const float* b, int64_t n, int64_t b_n, float* out, cudaStream_t stream);

/// out[i] = x[rows[i]] for i < m (rows of `width` floats). A row index outside [0, n_rows) gives a row of zeros (the
/// host validated the indices; this only keeps a bad one from reading out of bounds).
void gather_rows(const float* x, int64_t n_rows, int64_t width, const int32_t* rows, int64_t m, float* out,
                 cudaStream_t stream);

/// dst[i] = src[i] rounded to `type` (f16/bf16, round to nearest even; f32 copies).
void convert_from_f32(const float* src, int64_t n, void* dst, element_type type, cudaStream_t stream);

/// out[t] = table[ids[t] - row_begin] as f32 when row_begin <= ids[t] < row_begin + n_rows, else zeros (the
/// vocab-parallel lookup of kernels/backend.hpp). table: [n_rows, n_embd] of `ttype`.
void embedding(const int32_t* ids, int64_t n_tokens, const void* table, element_type ttype, int64_t row_begin,
               int64_t n_rows, int64_t n_embd, float* out, cudaStream_t stream);

}  // namespace actorllm::cuda
