// `--load-format dummy`: counter-based random weights. Each value is splitmix64 of (per-tensor key + full-tensor
// index), so any slice of any tensor can be generated independently, in parallel, and identically on every rank.
#include "model/slice_plan.hpp"
#include "model/weight_loader.hpp"
#include "util/check.hpp"

#include "util/progress_bar.hpp"

#include <array>
#include <string_view>
#ifdef __F16C__
#include <immintrin.h>
#endif

namespace actorllm::model {

namespace {

constexpr uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed so similar names give unrelated streams
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return mix64(mix64(seed + golden_gamma) ^ mix64(h));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// value = center + scale * u, u uniform in [-1, 1).
struct value_range {
  float center;
  float scale;
};

value_range range_for(std::string_view name) {
  if (ends_with(name, "norm.weight"))  // RMSNorm gains start at 1 in HF; a little noise keeps mix-ups visible
    return {1.0f, 0.02f};
  if (ends_with(name, ".bias"))
    return {0.0f, 0.02f};
  return {0.0f, 0.0346410162f};  // std 0.02 (HF initializer_range) as a uniform: 0.02 * sqrt(3)
}

/// Fills dst[0, n) with the values of full-tensor indices [first, first + n).
void fill_run(uint64_t key, value_range r, int64_t first, void* dst, dtype type, size_t n) {
  constexpr size_t block = 512;
  std::array<float, block> values;  // generate in blocks so the hash loop vectorises apart from the conversion
  for (size_t done = 0; done < n; done += block) {
    const size_t m = std::min(block, n - done);
    const uint64_t base = key + static_cast<uint64_t>(first + static_cast<int64_t>(done)) * golden_gamma;
    for (size_t i = 0; i < m; ++i) {
      const uint64_t h = mix64(base + i * golden_gamma);
      const auto u = static_cast<float>(static_cast<int32_t>(h >> 32)) * (1.0f / 2147483648.0f);
      values[i] = r.center + r.scale * u;
    }
    switch (type) {
      case dtype::f32: {
        auto* d = static_cast<float*>(dst) + done;
        for (size_t i = 0; i < m; ++i)
          d[i] = values[i];
        break;
      }
      case dtype::f16: {
        auto* d = static_cast<uint16_t*>(dst) + done;
        size_t i = 0;
#ifdef __F16C__
        // The portable conversion is a call per element; F16C rounds the same way (to nearest even) 8 at a time.
        for (; i + 8 <= m; i += 8)
          _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                           _mm256_cvtps_ph(_mm256_loadu_ps(values.data() + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < m; ++i)
          d[i] = f32_to_f16(values[i]);
        break;
      }
      case dtype::bf16: {
        auto* d = static_cast<uint16_t*>(dst) + done;
        for (size_t i = 0; i < m; ++i)
          d[i] = f32_to_bf16(values[i]);
        break;
      }
      case dtype::fp8_e4m3:
      case dtype::i32:
      case dtype::i64:
        ACTORLLM_CHECK(false, "dummy weights: integer types hold no weights");
    }
  }
}

// Fewer chunks than the loader: generating is compute-bound, so only balance matters.
constexpr int64_t chunk_elements = int64_t{1} << 20;

}  // namespace

model_weights make_dummy_weights(const model_config& cfg, const weight_table& table, const shard_spec& shard_in,
                                 dtype type, uint64_t seed) {
  const shard_spec shard = resolve_shard(cfg, shard_in);
  struct fill_job {
    uint64_t key;
    value_range range;
    slice_layout layout;
    host_tensor* dst;
  };
  std::vector<fill_job> jobs;
  std::vector<slice_chunk> chunks;
  model_weights weights;
  for (const auto& decl : table.weights) {
    const tensor_slice slice = slice_for(decl, shard.tp_rank, shard.tp_size);
    host_tensor& dst = weights.insert(decl.name, host_tensor(type, slice.shape));
    if (decl.kind == shard_kind::vocab)
      dst.row_offset = slice.begin;
    jobs.push_back({tensor_key(seed, decl.name), range_for(decl.name), make_slice_layout(decl.shape, slice), &dst});
    append_chunks(jobs.size() - 1, jobs.back().layout, chunk_elements, chunks);
  }
  auto& progress = util::weight_loading_progress();
  progress.add_total(weights.total_bytes());
  parallel_for(chunks.size(), [&](size_t i) {
    const slice_chunk& c = chunks[i];
    const fill_job& job = jobs[c.tensor];
    auto* dst = static_cast<std::byte*>(job.dst->data());
    const size_t n = static_cast<size_t>(c.run_end - c.run_begin);
    for (int64_t o = c.outer_begin; o < c.outer_end; ++o) {
      const auto to = static_cast<size_t>(job.layout.slice_index(o, c.run_begin));
      fill_run(job.key, job.range, job.layout.full_index(o, c.run_begin), dst + to * dtype_size(type), type, n);
    }
    progress.advance(static_cast<uint64_t>(c.outer_end - c.outer_begin) *
                     static_cast<uint64_t>(c.run_end - c.run_begin) * dtype_size(type));
  });
  progress.finish_if_complete();
  return weights;
}

}  // namespace actorllm::model
