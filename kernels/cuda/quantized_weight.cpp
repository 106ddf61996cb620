// Packing quantized Linear weights for the CUDA GEMV, and its launch plans.
#include "kernels/cuda/quantized_weight.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace actorllm::cuda {

using namespace qgemv;

bool gemv_format_supported(int bits, int64_t n_in, int64_t group_size) {
  return (bits == 4 || bits == 8) && n_in > 0 && group_size > 0 && group_size % tile_inputs == 0 &&
         n_in % group_size == 0;
}

gemv_layout gemv_layout_of(const quantized_linear& w) {
  if (!gemv_format_supported(w.bits, w.n_in, w.group_size))
    throw std::invalid_argument("gemv_layout_of: " + w.describe() + " is not a format of the CUDA GEMV");
  return make_gemv_layout(w.bits, w.n_out, w.n_in, w.group_size);
}

std::vector<uint8_t> pack_for_gemv(const quantized_linear& w, const gemv_layout& l) {
  std::vector<uint8_t> image(static_cast<size_t>(l.total_bytes), 0);  // padding: zero codes, scales and zeros
  // Where each code of a chunk comes from (row and input within the chunk's 16 x inputs_per_chunk block) and where it
  // goes, once for all chunks: the loop below is then a gather (a few ns per code: an 8B model packs in seconds).
  struct move {
    int row, col, byte, shift;
  };
  const int tiles = tiles_per_chunk(l.bits);
  std::vector<move> moves;
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < tiles; ++j)
      for (int e = 0; e < 8; ++e) {
        const code_place p = place_in_chunk(l.bits, lane, j, e);
        moves.push_back({a_row(lane, e), j * tile_inputs + a_input(lane, e), p.byte, p.shift});
      }
  const int64_t chunk_inputs = inputs_per_chunk(l.bits);
  for (int64_t rt = 0; rt < l.n_row_tiles; ++rt)
    for (int64_t c = 0; c < l.n_chunks; ++c) {
      uint8_t* chunk = image.data() + chunk_offset(l, rt, c);
      const int64_t row0 = rt * tile_rows, col0 = c * chunk_inputs;
      const uint8_t* src = w.codes.data() + row0 * l.n_in + col0;
      if (row0 + tile_rows <= l.n_out && col0 + chunk_inputs <= l.n_in) {
        for (const move& m : moves)
          chunk[m.byte] |= static_cast<uint8_t>(src[m.row * l.n_in + m.col] << m.shift);
        continue;
      }
      for (const move& m : moves)  // the last row tile or chunk: only what lies inside the weight
        if (row0 + m.row < l.n_out && col0 + m.col < l.n_in)
          chunk[m.byte] |= static_cast<uint8_t>(src[m.row * l.n_in + m.col] << m.shift);
    }
  auto* scales = reinterpret_cast<float*>(image.data() + l.scales_offset);
  uint8_t* zeros = image.data() + l.zeros_offset;
  for (int64_t row = 0; row < l.n_out; ++row)
    for (int64_t g = 0; g < l.n_groups; ++g) {
      const int64_t at = group_record(l, row / tile_rows, g) + row % tile_rows;
      scales[at] = w.scales[static_cast<size_t>(row * l.n_groups + g)];
      zeros[at] = w.zeros[static_cast<size_t>(row * l.n_groups + g)];
    }
  return image;
}

weight_view quantized_weight::view() const {
  const auto* base = static_cast<const uint8_t*>(memory_->data());
  weight_view v;
  v.codes = base;
  v.scales = reinterpret_cast<const float*>(base + layout_.scales_offset);
  v.zeros = base + layout_.zeros_offset;
  v.layout = layout_;
  return v;
}

gemv_launch plan_quantized_gemv(const gemv_layout& l, int sm_count) {
  gemv_launch g;
  const int64_t min_blocks = 2 * static_cast<int64_t>(std::max(sm_count, 1));
  g.row_tiles_per_block = (l.n_row_tiles + 1) / 2 >= min_blocks ? 2 : 1;
  g.blocks = static_cast<unsigned>((l.n_row_tiles + g.row_tiles_per_block - 1) / g.row_tiles_per_block);
  return g;
}

int64_t dequant_chunk_rows(const gemv_layout& l) {
  const int64_t row_bytes = std::max<int64_t>(l.n_in, 1) * 2;
  const int64_t fit = dequant_scratch_bytes / row_bytes / tile_rows * tile_rows;
  const int64_t all = static_cast<int64_t>(l.n_row_tiles) * tile_rows;
  return std::clamp<int64_t>(fit, tile_rows, std::max<int64_t>(all, tile_rows));
}

}  // namespace actorllm::cuda
