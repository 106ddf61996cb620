// `--load-format dummy` with a quantized config: random float weights turned into what the format would hold (the
// layers' Linear weights; lm_head, embeddings and routers stay float), so a benchmark of a quantized shape runs the
// quantized kernels without a checkpoint.
#include "model/quantized_checkpoint.hpp"
#include "model/weight_loader.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace actorllm::model {

namespace {

/// max |w| of every full row of `decl` for output rows [r0, r0 + n): the slice's own rows when it holds whole rows,
/// else regenerated (dummy values are a pure function of seed, name and full index).
std::vector<float> row_amax(const model_config& cfg, const weight_decl& decl, const host_tensor& slice, dtype type,
                            uint64_t seed) {
  const host_tensor* rows = &slice;
  model_weights full;
  if (slice.shape[1] != decl.shape[1]) {
    weight_table one;
    one.weights.push_back(decl);
    shard_spec whole;
    whole.layer_begin = decl.layer >= 0 ? decl.layer : 0;
    whole.layer_end = whole.layer_begin + 1;
    full = make_dummy_weights(cfg, one, whole, type, seed);
    rows = &full.get(decl.name);
  }
  const int64_t n_out = rows->shape[0];
  const int64_t n_in = rows->shape[1];
  std::vector<float> amax(static_cast<size_t>(n_out), 0.0f);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i)
      amax[static_cast<size_t>(o)] =
          std::max(amax[static_cast<size_t>(o)],
                   std::fabs(load_as_f32(rows->data(), rows->type, static_cast<size_t>(o * n_in + i))));
  return amax;
}

}  // namespace

void quantize_dummy_weights(const model_config& cfg, const weight_table& table, const shard_spec& shard, dtype type,
                            uint64_t seed, model_weights& weights) {
  const quantization_config& q = cfg.quant;
  if (!q.quantized())
    return;
  const bool fp8 = q.method == quant_method::fp8 ||
                   (q.method == quant_method::compressed_tensors && q.format == ct_format::float_quantized);
  for (const weight_decl& decl : table.weights) {
    if (!decl.linear || decl.shape.size() != 2 || decl.kind == shard_kind::vocab ||
        decl.moe_slot == &moe_weights::router || decl.moe_slot == &moe_weights::shexp_router)
      continue;
    const host_tensor* h = weights.find(decl.name);
    if (h == nullptr)
      continue;
    const int64_t n_out = h->shape[0];
    const int64_t n_in = h->shape[1];
    std::vector<float> w(static_cast<size_t>(n_out * n_in));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = load_as_f32(h->data(), h->type, i);
    const bool per_channel = fp8 || q.group_size == 0;
    const std::vector<float> amax = per_channel ? row_amax(cfg, decl, *h, type, seed) : std::vector<float>{};
    if (fp8) {
      host_tensor out(dtype::bf16, h->shape);
      auto* dst = out.data_as<uint16_t>();
      for (int64_t o = 0; o < n_out; ++o) {
        const float* row = w.data() + o * n_in;
        fp8_e4m3_round_trip_to_bf16(row, n_in, fp8_channel_scale(amax[static_cast<size_t>(o)]), dst + o * n_in);
      }
      *weights.find_mutable(decl.name) = std::move(out);
      continue;
    }
    const int64_t full_group = q.group_size > 0 ? q.group_size : decl.shape[1];
    check_group_split(decl, full_group, shard.tp_size);
    const bool symmetric = q.method == quant_method::awq ? false : q.symmetric;
    quantized_linear ql = quantize_linear_rtn(w.data(), n_out, n_in, q.bits, q.group_size, symmetric);
    if (per_channel && symmetric) {
      // One group per row: the full row's scale (a row-parallel slice sees only part of the row).
      const int mid = 1 << (q.bits - 1);
      for (int64_t o = 0; o < n_out; ++o) {
        const float a = amax[static_cast<size_t>(o)];
        const float scale = a > 0 ? a / static_cast<float>(mid - 1) : 1.0f;
        ql.scales[static_cast<size_t>(o)] = scale;
        for (int64_t i = 0; i < n_in; ++i)
          ql.codes[static_cast<size_t>(o * n_in + i)] = static_cast<uint8_t>(
              std::clamp<long>(std::lround(w[static_cast<size_t>(o * n_in + i)] / scale) + mid, 0, 2 * mid - 1));
      }
    }
    if (q.method == quant_method::compressed_tensors)
      ql.activations = q.activations;
    weights.replace_with_quantized(decl.name, std::move(ql));
  }
}

}  // namespace actorllm::model
