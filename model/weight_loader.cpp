// Checkpoint loading: validate everything against the weight table first (so a bad checkpoint fails before any
// large copy), then copy the slices out of the mappings in parallel chunks, converting dtype on the way if asked.
#include "model/weight_loader.hpp"
#include "util/check.hpp"
#include "util/populate_pages.hpp"

#include "util/progress_bar.hpp"

#include "model/model_error.hpp"
#include "model/quantized_checkpoint.hpp"
#include "model/safetensors.hpp"
#include "model/slice_plan.hpp"
#include "util/log.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstring>

namespace actorllm::model {

namespace {

// ~4 MB of f32 per chunk: big enough to amortise the dispatch, small enough to balance a few huge embeddings.
constexpr int64_t chunk_elements = int64_t{1} << 20;

/// Element i of a possibly unaligned buffer (the mapping gives no alignment guarantee).
template <dtype T>
float read_element(const std::byte* p, size_t i) {
  if constexpr (T == dtype::f32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return T == dtype::f16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

template <dtype S>
void convert_from(const std::byte* src, void* dst, dtype dst_type, size_t n) {
  switch (dst_type) {
    case dtype::f32: {
      auto* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i)
        d[i] = read_element<S>(src, i);
      break;
    }
    case dtype::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i)
        d[i] = f32_to_f16(read_element<S>(src, i));
      break;
    }
    case dtype::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i)
        d[i] = f32_to_bf16(read_element<S>(src, i));
      break;
    }
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      ACTORLLM_CHECK(false, "weight loader: integer types hold no weights");
  }
}

void convert_elements(const std::byte* src, dtype src_type, void* dst, dtype dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  switch (src_type) {
    case dtype::f32:
      convert_from<dtype::f32>(src, dst, dst_type, n);
      break;
    case dtype::f16:
      convert_from<dtype::f16>(src, dst, dst_type, n);
      break;
    case dtype::bf16:
      convert_from<dtype::bf16>(src, dst, dst_type, n);
      break;
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      ACTORLLM_CHECK(false, "weight loader: integer types hold no weights or activations");
  }
}

std::string format_shape(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// Whether `--quantization fp8` quantizes `decl` at load: every Linear weight of the layers but the MoE routers (vLLM
/// leaves the lm_head and the router gates unquantized).
bool quantizes_at_load(const weight_decl& decl) {
  return decl.linear && decl.shape.size() == 2 && decl.kind != shard_kind::vocab &&
         decl.moe_slot != &moe_weights::router && decl.moe_slot != &moe_weights::shexp_router;
}

/// Where a float weight's slice can be used in place, in the checkpoint's mapping: it keeps its dtype, it is one
/// contiguous run of the file (the whole tensor, or a range of its first dimension), and it starts on a multiple of
/// its element size (safetensors promises no alignment; the CPU kernels read weights with unaligned loads, but not
/// across a misaligned element). Null when it must be copied.
const std::byte* usable_in_place(const safetensors_checkpoint::entry& src, const slice_layout& layout,
                                 std::optional<dtype> convert_to) {
  const dtype type = src.info->type;
  const bool whole = layout.begin == 0 && layout.end == layout.full_dim;  // a split dimension kept whole (tp 1)
  if ((convert_to && *convert_to != type) || (layout.outer != 1 && !whole) || !src.file->mapping())
    return nullptr;
  const std::byte* p = src.file->data(*src.info) + static_cast<size_t>(layout.full_index(0, 0)) * dtype_size(type);
  return reinterpret_cast<uintptr_t>(p) % dtype_size(type) == 0 ? p : nullptr;
}

// Copies chunk `c` of `layout`'s runs of the tensor at `src` into `dst` (the slice's elements back to back), converted.
// The chunk's span of the file is mapped in one call first: a column slice (tp > 1) reads every page of its tensor,
// and faulting them one by one took most of a TP=2 load of a 1.1B model on a 2-core VM (330 MiB copied per rank in
// 1.0 s against 0.45 s).
void copy_chunk(const std::byte* src, dtype src_type, const slice_layout& layout, const slice_chunk& c, std::byte* dst,
                dtype dst_type) {
  const size_t n = static_cast<size_t>(c.run_end - c.run_begin);
  const auto first = static_cast<size_t>(layout.full_index(c.outer_begin, c.run_begin));
  const auto last = static_cast<size_t>(layout.full_index(c.outer_end - 1, c.run_end));
  util::populate_for_reading(src + first * dtype_size(src_type), (last - first) * dtype_size(src_type));
  for (int64_t o = c.outer_begin; o < c.outer_end; ++o) {
    const auto from = static_cast<size_t>(layout.full_index(o, c.run_begin));
    const auto to = static_cast<size_t>(layout.slice_index(o, c.run_begin));
    convert_elements(src + from * dtype_size(src_type), src_type, dst + to * dtype_size(dst_type), dst_type, n);
  }
}

// A matrix's columns kept in their dtype (a row-parallel weight at tp > 1: o_proj, down_proj), as a deferred copy:
// known by its place in the file (a strided slice) until something reads it, so a backend that finds the weight by
// that place (the CPU's packed-weight cache) never copies it. Null where the slice is not that.
std::optional<host_tensor> deferred_columns(const safetensors_checkpoint::entry& src, const slice_layout& layout,
                                            const tensor_slice& slice, std::optional<dtype> convert_to) {
  const dtype type = src.info->type;
  if ((convert_to && *convert_to != type) || src.info->shape.size() != 2 || layout.inner != 1 || layout.outer == 1 ||
      (layout.begin == 0 && layout.end == layout.full_dim) || !src.file->mapping())
    return std::nullopt;
  const std::byte* tensor_bytes = src.file->data(*src.info);
  file_origin origin =
      src.file->mapping()->origin_of(tensor_bytes + static_cast<size_t>(layout.begin) * dtype_size(type));
  origin.row_stride = static_cast<uint64_t>(layout.full_dim) * dtype_size(type);
  auto fill = [tensor_bytes, layout, type](void* dst) {
    std::vector<slice_chunk> chunks;
    append_chunks(0, layout, chunk_elements, chunks);
    parallel_for(chunks.size(), [&](size_t i) {
      copy_chunk(tensor_bytes, type, layout, chunks[i], static_cast<std::byte*>(dst), type);
    });
  };
  return host_tensor::deferred(type, slice.shape, std::move(fill), src.file->mapping(), std::move(origin));
}

}  // namespace

model_weights load_weights(const model_config& cfg, const weight_table& table, const std::filesystem::path& dir,
                           const shard_spec& shard_in, std::optional<dtype> convert_to) {
  const auto start = std::chrono::steady_clock::now();
  const shard_spec shard = resolve_shard(cfg, shard_in);
  const auto ckpt = safetensors_checkpoint::open(dir);

  // How each Linear weight is stored (a quantized format, or float), every quantized tensor checked against its
  // declaration before anything is copied.
  std::vector<quantized_source> sources(table.weights.size());
  for (size_t i = 0; i < table.weights.size(); ++i) {
    const weight_decl& decl = table.weights[i];
    if (decl.linear)
      sources[i] = find_quantized_source(ckpt, decl, cfg.quant);
    if (sources[i].storage != linear_storage::float_weight && sources[i].storage != linear_storage::fp8_weight)
      check_group_split(decl, source_group_size(sources[i], cfg.quant, decl.shape[1]), shard.tp_size);
  }

  std::vector<std::string> missing;
  for (size_t i = 0; i < table.weights.size(); ++i) {
    const weight_decl& decl = table.weights[i];
    if (!decl.optional && sources[i].storage == linear_storage::float_weight && !ckpt.find(decl.name))
      missing.push_back(fmt::format("'{}'", decl.name));
  }
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 8);
    throw model_error(
        fmt::format("{}: the checkpoint lacks {} required tensor(s): {}{}", dir.string(), missing.size(),
                    fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                    missing.size() > shown ? fmt::format(" and {} more", missing.size() - shown) : std::string{}));
  }

  struct copy_job {
    safetensors_checkpoint::entry src;
    slice_layout layout;
    host_tensor* dst;
  };
  std::vector<copy_job> jobs;
  std::vector<slice_chunk> chunks;
  model_weights weights;
  std::vector<size_t> quantized;  // declarations read by the quantized path, after the plain copies
  size_t copied_bytes = 0;        // of the plain copies (a weight used in place costs nothing here)
  size_t deferred_bytes = 0;      // of the copies made when first read, if ever
  for (size_t di = 0; di < table.weights.size(); ++di) {
    const weight_decl& decl = table.weights[di];
    if (sources[di].storage != linear_storage::float_weight) {
      quantized.push_back(di);
      continue;
    }
    auto src = ckpt.find(decl.name);
    if (!src)
      continue;  // optional and absent
    const tensor_info& info = *src->info;
    if (!info.is_float())
      throw model_error(fmt::format("{}: tensor '{}' has dtype {}, but it is read as a float weight",
                                    src->file->path().string(), decl.name, stored_type_name(info.stored)));
    if (cfg.quant.quantize_at_load && quantizes_at_load(decl)) {
      if (info.shape != decl.shape)
        throw model_error(fmt::format("{}: tensor '{}' has shape {}, expected {} from the model config",
                                      src->file->path().string(), decl.name, format_shape(info.shape),
                                      format_shape(decl.shape)));
      quantized.push_back(di);
      continue;
    }
    if (info.shape != decl.shape)
      throw model_error(fmt::format("{}: tensor '{}' has shape {}, expected {} from the model config",
                                    src->file->path().string(), decl.name, format_shape(info.shape),
                                    format_shape(decl.shape)));
    const tensor_slice slice = slice_for(decl, shard.tp_rank, shard.tp_size);
    const slice_layout layout = make_slice_layout(decl.shape, slice);
    if (const std::byte* in_place = usable_in_place(*src, layout, convert_to)) {
      weights
          .insert(decl.name, host_tensor::view(info.type, slice.shape, in_place, src->file->mapping(),
                                               src->file->mapping()->origin_of(in_place)))
          .row_offset = decl.kind == shard_kind::vocab ? slice.begin : 0;
      continue;
    }
    if (std::optional<host_tensor> columns = deferred_columns(*src, layout, slice, convert_to)) {
      deferred_bytes += columns->nbytes();
      weights.insert(decl.name, std::move(*columns));
      continue;
    }
    host_tensor& dst = weights.insert(decl.name, host_tensor(convert_to.value_or(info.type), slice.shape));
    if (decl.kind == shard_kind::vocab)
      dst.row_offset = slice.begin;
    copied_bytes += dst.nbytes();
    jobs.push_back({*src, layout, &dst});
    append_chunks(jobs.size() - 1, jobs.back().layout, chunk_elements, chunks);
  }

  auto& progress = util::weight_loading_progress();
  if (copied_bytes > 0)  // a checkpoint used in place has nothing to show progress of
    progress.add_total(copied_bytes);
  parallel_for(chunks.size(), [&](size_t i) {
    const slice_chunk& c = chunks[i];
    const copy_job& job = jobs[c.tensor];
    copy_chunk(job.src.file->data(*job.src.info), job.src.info->type, job.layout, c,
               static_cast<std::byte*>(job.dst->data()), job.dst->type);
    progress.advance(static_cast<uint64_t>(c.outer_end - c.outer_begin) *
                     static_cast<uint64_t>(c.run_end - c.run_begin) * dtype_size(job.dst->type));
  });

  // Quantized weights: each read by its format's accessor (in parallel over its rows).
  for (size_t di : quantized) {
    const weight_decl& decl = table.weights[di];
    const quantized_source& src = sources[di];
    switch (src.storage) {
      case linear_storage::float_weight:
        weights.insert(decl.name,
                       quantize_fp8_slice_as_bf16(*ckpt.find(decl.name), decl, shard.tp_rank, shard.tp_size));
        break;
      case linear_storage::fp8_weight:
        weights.insert(decl.name, read_fp8_slice_as_bf16(src, decl, cfg.quant, shard.tp_rank, shard.tp_size))
            .row_offset = decl.kind == shard_kind::vocab ? slice_for(decl, shard.tp_rank, shard.tp_size).begin : 0;
        break;
      case linear_storage::awq:
      case linear_storage::gptq:
      case linear_storage::ct_packed:
      case linear_storage::int8_weight:
        weights.insert_quantized(decl.name, read_quantized_slice(src, decl, cfg.quant, shard.tp_rank, shard.tp_size));
        break;
    }
  }
  progress.finish_if_complete();

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::debug("weight_loader",
             "loaded {} tensors ({:.1f} MiB, {:.1f} MiB of them copied, {:.1f} MiB to be copied when first read, the "
             "rest used in place) from {} for tp rank {}/{}, layers [{}, {}) in {:.2f} s",
             weights.size(), static_cast<double>(weights.total_bytes()) / (1 << 20),
             static_cast<double>(copied_bytes) / (1 << 20), static_cast<double>(deferred_bytes) / (1 << 20),
             dir.string(), shard.tp_rank, shard.tp_size, shard.layer_begin, shard.layer_end, seconds);
  return weights;
}

}  // namespace actorllm::model
