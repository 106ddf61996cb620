// `--load-format dummy` with a quantized config: random float weights turned into what the format would hold (the
// layers' Linear weights; lm_head, embeddings and routers stay float), so a benchmark of a quantized shape runs the
// quantized kernels without a checkpoint.
#include "model/quantized_checkpoint.hpp"
#include "model/weight_loader.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace actorllm::model {

void quantize_dummy_weights(const model_config& cfg, const weight_table& table, const shard_spec& shard,
                            model_weights& weights) {
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
    if (fp8) {
      host_tensor out(dtype::bf16, h->shape);
      auto* dst = out.data_as<uint16_t>();
      for (int64_t o = 0; o < n_out; ++o) {
        const float* row = w.data() + o * n_in;
        float amax = 0;
        for (int64_t i = 0; i < n_in; ++i)
          amax = std::max(amax, std::fabs(row[i]));
        const float scale = amax > 0 ? amax / 448.0f : 1.0f;
        for (int64_t i = 0; i < n_in; ++i)
          dst[o * n_in + i] = f32_to_bf16(fp8_e4m3_to_f32(f32_to_fp8_e4m3(row[i] / scale)) * scale);
      }
      const int64_t row_offset = h->row_offset;
      *weights.find_mutable(decl.name) = std::move(out);
      weights.find_mutable(decl.name)->row_offset = row_offset;
      continue;
    }
    const int64_t full_group = q.group_size > 0 ? q.group_size : decl.shape[1];
    check_group_split(decl, full_group, shard.tp_rank, shard.tp_size);
    const int64_t group = q.group_size > 0 ? q.group_size : 0;
    const bool symmetric = q.method == quant_method::awq ? false : q.symmetric;
    quantized_linear ql = quantize_linear_rtn(w.data(), n_out, n_in, q.bits, group, symmetric);
    if (q.method == quant_method::compressed_tensors)
      ql.activations = q.activations;
    weights.replace_with_quantized(decl.name, std::move(ql));
  }
}

}  // namespace actorllm::model
