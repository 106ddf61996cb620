// bf16 panels times bf16 token rows on AMX tiles (TDPBF16PS: a 16 x 32 by 32 x 16 bf16 product added to 16 x 16 f32
// sums in one instruction, sixteen times the multiply-adds of vdpbf16ps a cycle). The GEMMs of prefill and of batched
// decode run here where the CPU has AMX-BF16 (Sapphire Rapids and later Xeons); internal to kernels/cpu, called by
// matmul_bf16.cpp.
#pragma once

#include <cstdint>

namespace actorllm::cpu {

/// Whether this process runs bf16 GEMMs on AMX tiles: the build targets AMX-BF16 (-march=native on such a CPU), the
/// CPU has it, and Linux granted the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM). Asked once.
bool amx_bf16_usable();

/// sums[p][t][j] = sum over k < k_pad of xb[t][k] * panel p's [k][j], for p < n_panels, t < n_rows, j < 32: each panel
/// in the layout of tensor_layout::cpu_bf16_panels ([k_pad / 2][32] bf16 pairs), xb's rows bf16, ld elements apart,
/// k_pad a multiple of 32. n_rows is a multiple of 16 and xb holds that many rows (a row past the caller's tokens only
/// makes its own sums). sums: n_panels * n_rows * 32 floats. Requires amx_bf16_usable(); configures and releases the
/// calling thread's tiles.
void amx_panels_product(const uint16_t* xb, int64_t ld, int64_t n_rows, const uint32_t* const* panels, int n_panels,
                        int64_t k_pad, float* sums);

/// Writes pair rows [kp, kp + 16) of `panel` (k_pad inputs) as a plain panel holds them ([16][32] bf16 pairs, 128
/// bytes a row) to `rows` (2 KiB): how amx_rebuilt_panels_product reads a panel kept in another form.
using panel_rows_fn = void (*)(const void* panel, int64_t k_pad, int64_t kp, uint32_t* rows);

/// amx_panels_product over panels kept in another form (compact panels), rebuilt by `rows_of` into a buffer that stays
/// in L1 just before the tiles load them, instead of a whole plain copy written out first: up to 32 token rows
/// (batched decode: each panel read once, through all of K) a step of 16 pair rows (2 KiB) at a time; more rows a K
/// block of 128 pair rows (16 KiB) at a time, which every block of 32 token rows then passes over. The same products
/// in the same order as amx_panels_product over the plain panels, so the same sums. Unlike there, n_rows need not be a
/// multiple of 16: xb holds and sums has room for n_rows rounded up to 16 (sums: n_panels * that * 32 floats), and
/// up to 32 rows the tiles load and compute only the rows that hold tokens (the sums' other rows are left as they
/// were).
void amx_rebuilt_panels_product(const uint16_t* xb, int64_t ld, int64_t n_rows, const void* const* panels, int n_panels,
                                int64_t k_pad, panel_rows_fn rows_of, float* sums);

}  // namespace actorllm::cpu
