// The CPU backend: argument checks, then the kernels of kernels/cpu. The checks run about ten times per layer per
// decode step, so they are a few compares each and format their message only when they fail.
#include "kernels/cpu/cpu_backend.hpp"

#include "kernels/backend_checks.hpp"

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/lora.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_quantized.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/sampling.hpp"
#include "util/check.hpp"
#include "util/log.hpp"
#include "util/populate_pages.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>

namespace actorllm::cpu {
namespace {

// The shared argument checks (kernels/backend_checks.hpp) for tensors in host memory.
const backend_checks host{device{}};

void check_host(const tensor& t, const char* op, const char* arg) { host.on_device(t, op, arg); }
void check_host(const tensor& t, dtype type, const char* op, const char* arg) { host.on_device(t, type, op, arg); }
void check_numel(const tensor& t, int64_t n, const char* op, const char* arg) { backend_checks::numel(t, n, op, arg); }
void check_disjoint(const tensor& a, const tensor& b, const char* op, const char* what) {
  backend_checks::disjoint(a, b, op, what);
}

float* f32(const tensor& t) { return t.data_as<float>(); }

// The panels of a quantized weight (tensor_layout::cpu_q4 / cpu_q8), which only import_quantized_linear makes.
const quantized_panels& panels_of(const tensor& w) {
  const auto* p = dynamic_cast<const quantized_panels*>(w.buf.get());
  ACTORLLM_CHECK(p != nullptr && p->n_out() == w.dim(0) && p->n_in() == w.dim(1),
                 fmt::format("matmul: {} is not a quantized weight of this backend", w.describe()).c_str());
  return *p;
}

// Row-wise ops (norms, rope, the cache write) run over the pool for a prefill's many rows; a decode step's few rows
// stay on the calling thread, where a dispatch would cost more than the work.
constexpr int64_t parallel_min_rows = 16;

template <class Fn>
void for_rows(thread_pool& pool, int64_t n_rows, Fn&& fn) {
  if (n_rows < parallel_min_rows || pool.size() == 1)
    fn(int64_t{0}, n_rows);
  else
    pool.parallel_for(n_rows, fn);
}

// The cache as the kernels take it (its shape checked by backend_checks::kv_cache).
paged_kv_view kv_view(const kv_layer& cache) {
  return paged_kv_view{cache.k.data(),    cache.v.data(),   cache.n_blocks(), cache.block_size(),
                       cache.n_head_kv(), cache.head_dim(), cache.k.type,     cache.heads_outer};
}

// alloc's and alloc_kv_cache's check: every dimension of `shape` is at least 0.
void check_alloc_shape(const tensor_shape& shape, const char* op) {
  for (int i = 0; i < shape.n_dims; ++i)
    ACTORLLM_CHECK(shape[i] >= 0, fmt::format("{}: negative dimension in {}", op, shape.to_string()).c_str());
}

}  // namespace

cpu_backend::cpu_backend(int n_threads) : cpu_backend(n_threads, packed_weight_cache::from_environment()) {}

cpu_backend::cpu_backend(int n_threads, std::shared_ptr<packed_weight_cache> weight_cache)
    : pool_(n_threads), weight_cache_(std::move(weight_cache)), compact_panels_(cpu::compact_panels_wanted()) {}

device cpu_backend::where() const { return device{}; }

std::string cpu_backend::describe() const { return fmt::format("cpu ({} threads)", pool_.size()); }

// ---- memory ----------------------------------------------------------------------------------------------------

tensor cpu_backend::alloc(dtype type, tensor_shape shape) {
  check_alloc_shape(shape, "alloc");
  return make_host_tensor(type, shape);
}

tensor cpu_backend::alloc_kv_cache(dtype type, tensor_shape shape) {
  check_alloc_shape(shape, "alloc_kv_cache");
  // Uninitialised on purpose: the pages stay uncommitted until a block is first written. On huge pages (advised; the
  // kernel may still give small ones) each layer's k or v region faults in once per 2 MiB: on 4 KiB pages a decode
  // step wrote each token into a fresh page of some layer every few steps, and a fault costs tens of microseconds on a
  // VM. TinyLlama's shape, batch 1, fresh cache: 14 faults and 0.3 ms of write_kv per 35 ms step on small pages, 0-3
  // and 0.03 ms on huge ones. Attention over long contexts also walks fewer TLB entries.
  return make_huge_host_tensor(type, shape);
}

tensor cpu_backend::import_host(tensor host) {
  ACTORLLM_CHECK(host.where().kind == device_kind::cpu,
                 fmt::format("import_host: the tensor must be in host memory, got {}", host.describe()).c_str());
  return host;
}

namespace {

// Rows of one tensor_layout::cpu_bf16_panels panel.
constexpr int64_t panel_rows = 32;

// Whether a layout is bf16 panels the matmul kernels read in place (plain or compact).
bool is_panels(tensor_layout l) {
  return l == tensor_layout::cpu_bf16_panels || l == tensor_layout::cpu_bf16_compact_panels;
}

// What the packed-weight cache's key is made of: the parts' files and places, or their bytes; a part that is a strided
// slice of its file (its stride follows), or was made from its file's bytes (the transform follows).
constexpr uint64_t in_files_tag = 1, by_bytes_tag = 2, strided_part_tag = 3, transformed_part_tag = 4;
// A quantized weight's layout (quantized_panels), named by where the loader read it from (quantized_linear::origin).
constexpr uint64_t quantized_tag = 5;
// Which form of bf16 panels an entry holds (tensor_layout::cpu_bf16_panels or cpu_bf16_compact_panels).
constexpr uint64_t plain_panels_tag = 6, compact_panels_tag = 7;

// Whether a cached entry is the compact panels of a [rows, n_in] weight: its panels' stride times their count.
bool compact_entry_fits(buffer& entry, int64_t rows, int64_t n_in) {
  const int64_t n_panels = (rows + panel_rows - 1) / panel_rows;
  const size_t stride = entry.size() >= cpu::compact_header_bytes ? cpu::compact_panel_stride(entry.data()) : 0;
  return stride >= cpu::compact_exceptions_offset((n_in + 31) / 32 * 32) && stride % 64 == 0 &&
         stride * static_cast<size_t>(n_panels) == entry.size();
}

// Whether `parts` (one weight's row blocks, stacked in order) pack into tensor_layout::cpu_bf16_panels each in its own
// place: bf16 row-major host parts of one width, every one but the last whole 32-row panels, where the kernels read
// packed weights (cpu::bf16_panels_preferred: vdpbf16ps, or an AVX2 build's FMA kernels).
bool packs_in_place(std::span<const tensor> parts) {
  if (parts.empty() || !cpu::bf16_panels_preferred())
    return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const tensor& p = parts[i];
    if (p.type != dtype::bf16 || p.shape.n_dims != 2 || p.layout != tensor_layout::row_major ||
        p.where().kind != device_kind::cpu || p.shape[1] != parts.front().shape[1] ||
        (i + 1 < parts.size() && p.shape[0] % panel_rows != 0))
      return false;
  }
  return true;
}

}  // namespace

tensor cpu_backend::packed_panels(std::span<const tensor> parts) {
  const int64_t n_in = parts.front().shape[1];
  int64_t rows = 0;
  for (const tensor& p : parts)
    rows += p.shape[0];
  // Compact panels' size follows from the weights' values (their exceptions): known once the parts are read.
  size_t bytes = compact_panels_ ? packed_weight_cache::any_size : cpu::bf16_panels_bytes(rows, n_in);
  tensor packed;
  packed.type = dtype::bf16;
  packed.shape = tensor_shape{rows, n_in};
  packed.layout = compact_panels_ ? tensor_layout::cpu_bf16_compact_panels : tensor_layout::cpu_bf16_panels;
  // The packed bytes follow from the parts' bytes, their row counts and the panel format: the cache's key. Parts
  // used in place in their checkpoint are known by their file and place in it, which costs no read (reading them is
  // most of a load on a VM: the first touch of each page goes through the hypervisor); others by their bytes.
  util::digest128 key;
  std::vector<file_origin> sources;
  bool parts_populated = false;  // mapped for reading already, by the digest of their bytes
  if (weight_cache_ != nullptr) {
    // (A view into a strided slice past its start is not a place in the file the key can name: known by its bytes.)
    const bool in_files = std::all_of(parts.begin(), parts.end(), [](const tensor& p) {
      const std::optional<file_origin> o = p.buf->origin();
      return o && (o->row_stride == 0 || p.offset == 0);
    });
    parts_populated = !in_files;
    util::fast_digest d;
    d.add(in_files ? in_files_tag : by_bytes_tag);
    d.add(compact_panels_ ? compact_panels_tag : plain_panels_tag);
    d.add(compact_panels_ ? cpu::compact_panels_format : cpu::bf16_panels_format);
    d.add(static_cast<uint64_t>(n_in));
    for (const tensor& p : parts) {
      d.add(static_cast<uint64_t>(p.shape[0]));
      if (in_files) {
        const file_origin o = *p.buf->origin();
        sources.push_back(o);
        for (uint64_t field : {o.device, o.inode, o.size, static_cast<uint64_t>(o.modified_ns),
                               static_cast<uint64_t>(o.changed_ns), o.offset + p.offset})
          d.add(field);
        if (o.row_stride != 0) {  // a strided slice: other bytes than the run at the same offset
          d.add(strided_part_tag);
          d.add(o.row_stride);
        }
        if (o.transform != 0) {  // made from those bytes (quantized at load): other bytes again
          d.add(transformed_part_tag);
          d.add(o.transform);
        }
        continue;
      }
      util::populate_for_reading(p.data(), p.nbytes());
      d.add({static_cast<const std::byte*>(p.data()), p.nbytes()}, pool_);
    }
    key = d.value();
    if (std::shared_ptr<buffer> mapped = weight_cache_->find(key, bytes, pool_)) {
      if (!compact_panels_ || compact_entry_fits(*mapped, rows, n_in)) {
        packed.buf = std::move(mapped);
        return packed;
      }
      log::warning("cpu", "a packed weight cache entry of {} holds compact panels of another shape; packed again",
                   packed.shape.to_string());
    }
  }
  if (!parts_populated)
    for (const tensor& p : parts)
      util::populate_for_reading(p.data(), p.nbytes());
  std::vector<cpu::bf16_rows> blocks;
  for (const tensor& p : parts)
    blocks.push_back({p.data_as<uint16_t>(), p.shape[0]});
  std::optional<cpu::compact_panels_plan> plan;
  if (compact_panels_) {  // the size, from a first read of the parts
    plan = cpu::plan_compact_panels(blocks, n_in, pool_);
    bytes = plan->bytes();
  }
  // Packed straight into a new cache entry's pages where the cache takes it, else into memory of its own.
  std::unique_ptr<packed_weight_cache::pending_entry> entry =
      weight_cache_ != nullptr ? weight_cache_->begin_store(key, bytes, std::move(sources)) : nullptr;
  const std::shared_ptr<host_buffer> own = entry == nullptr ? host_buffer::allocate_huge(bytes) : nullptr;
  auto* out = entry != nullptr ? entry->data() : static_cast<std::byte*>(own->data());
  if (plan) {
    cpu::write_compact_panels(*plan, blocks, reinterpret_cast<uint8_t*>(out), pool_);
  } else {
    auto* panels = reinterpret_cast<uint16_t*>(out);
    for (const cpu::bf16_rows& part : blocks) {
      // Every part before it is whole panels, so its panels are the stacked weight's from its first row on.
      cpu::pack_bf16_panels(part.w, part.n_rows, n_in, panels, pool_);
      panels += cpu::bf16_panels_bytes(part.n_rows, n_in) / sizeof(uint16_t);
    }
  }
  packed.buf = entry != nullptr ? entry->commit(pool_) : own;
  return packed;
}

tensor cpu_backend::import_linear_weight(tensor host) {
  tensor t = import_host(std::move(host));
  return packs_in_place({&t, 1}) ? counted(packed_panels({&t, 1})) : t;
}

tensor cpu_backend::import_stacked_linear_weight(std::span<const tensor> parts) {
  return packs_in_place(parts) ? counted(packed_panels(parts)) : backend::import_stacked_linear_weight(parts);
}

tensor cpu_backend::counted(tensor packed) {
  const int64_t n_panels = (packed.dim(0) + panel_rows - 1) / panel_rows;
  packed_bytes_ += packed.layout == tensor_layout::cpu_bf16_compact_panels
                       ? cpu::compact_panel_stride(packed.data()) * static_cast<size_t>(n_panels)
                       : cpu::bf16_panels_bytes(packed.dim(0), packed.dim(1));
  packed_bf16_bytes_ += packed.nbytes();
  return packed;
}

// TinyLlama-shape bf16 weights on a 2-vCPU Zen 3 VM (AVX2: row-major weights, nothing packed), `actorllm generate
// --max-tokens 1` from the page cache: stacked, q|k|v and gate|up were copied (1.5 of the 2.2 GB, into fresh pages
// the kernel zeroes first): 1.6 s, 1.2 s of it in the kernel; apart, nothing is copied.
bool cpu_backend::stacks_linear_parts(std::span<const tensor> parts) const { return packs_in_place(parts); }

namespace {

// Whether the CPU keeps w as quantized_panels (else the default import dequantizes it to bf16).
bool keeps_codes(const quantized_linear& w) {
  return w.activations != activation_quant::none ||
         (cpu::have_quantized_avx512_kernels() && cpu::quantized_vector_format(w.activations, w.n_in, w.group_size));
}

// The packed-weight cache's name of w's quantized_panels: where its codes come from and the layout's shape and
// version.
util::digest128 quantized_key(const quantized_linear& w) {
  util::fast_digest d;
  d.add(quantized_tag);
  d.add(cpu::quantized_panels_format);
  d.add(w.origin->lo);
  d.add(w.origin->hi);
  for (int64_t v : {int64_t{w.bits}, w.n_out, w.n_in, w.group_size, static_cast<int64_t>(w.activations)})
    d.add(static_cast<uint64_t>(v));
  return d.value();
}

tensor quantized_tensor(const quantized_linear& w, std::shared_ptr<cpu::quantized_panels> panels) {
  tensor t;
  t.type = dtype::bf16;  // logical: the values are those of the dequantized weight
  t.shape = tensor_shape{w.n_out, w.n_in};
  t.layout = panels->layout();
  t.buf = std::move(panels);
  return t;
}

}  // namespace

tensor cpu_backend::find_quantized_linear(const quantized_linear& w) {
  if (weight_cache_ == nullptr || !w.origin || !keeps_codes(w))
    return {};
  std::shared_ptr<buffer> mapped =
      weight_cache_->find(quantized_key(w), cpu::quantized_panels::storage_bytes(w), pool_);
  if (mapped == nullptr)
    return {};
  return quantized_tensor(w, std::make_shared<cpu::quantized_panels>(w, std::move(mapped)));
}

tensor cpu_backend::import_quantized_linear(const quantized_linear& w) {
  w.validate();
  if (!keeps_codes(w))
    return backend::import_quantized_linear(w);
  // A weight named by its origin is packed straight into a new cache entry (where the cache takes it), so that the
  // next start maps it (find_quantized_linear) and reads none of the checkpoint's codes.
  const size_t bytes = cpu::quantized_panels::storage_bytes(w);
  std::unique_ptr<packed_weight_cache::pending_entry> entry =
      weight_cache_ != nullptr && w.origin ? weight_cache_->begin_store(quantized_key(w), bytes, w.origin_files)
                                           : nullptr;
  std::shared_ptr<host_buffer> own = entry == nullptr ? host_buffer::allocate_huge(bytes) : nullptr;
  cpu::quantized_panels::pack(w, pool_, entry != nullptr ? static_cast<void*>(entry->data()) : own->data());
  std::shared_ptr<buffer> storage = entry != nullptr ? entry->commit(pool_) : std::move(own);
  return quantized_tensor(w, std::make_shared<cpu::quantized_panels>(w, std::move(storage)));
}

void cpu_backend::upload(const tensor& dst, const void* src, size_t bytes) {
  check_host(dst, "upload", "dst");
  ACTORLLM_CHECK(bytes <= dst.nbytes(),
                 fmt::format("upload: {} bytes do not fit {} ({} bytes)", bytes, dst.describe(), dst.nbytes()).c_str());
  if (bytes != 0)
    std::memcpy(dst.data(), src, bytes);
}

void cpu_backend::download(const tensor& src, void* dst, size_t bytes) {
  check_host(src, "download", "src");
  ACTORLLM_CHECK(bytes <= src.nbytes(),
                 fmt::format("download: {} bytes asked of {} ({} bytes)", bytes, src.describe(), src.nbytes()).c_str());
  if (bytes != 0)
    std::memcpy(dst, src.data(), bytes);
}

void cpu_backend::copy(const tensor& src, const tensor& dst) {
  check_host(src, "copy", "src");
  check_host(dst, "copy", "dst");
  ACTORLLM_CHECK(src.nbytes() == dst.nbytes(),
                 fmt::format("copy: {} and {} differ in size", src.describe(), dst.describe()).c_str());
  if (same_start(src, dst))
    return;
  check_disjoint(src, dst, "copy", "src and dst");
  if (src.nbytes() != 0)
    std::memcpy(dst.data(), src.data(), src.nbytes());
}

void cpu_backend::synchronize() {}

// ---- ops -------------------------------------------------------------------------------------------------------

void cpu_backend::embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) {
  const int64_t n_embd = host.embedding(ids, table, out);
  cpu::embedding(ids.data_as<int32_t>(), ids.numel(), table.data(), table.type, row_begin, table.dim(0), n_embd,
                 f32(out));
}

void cpu_backend::rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) {
  const int64_t width = host.rms_norm(x, weight, out);
  for_rows(pool_, x.numel() / width, [&](int64_t b, int64_t e) {
    cpu::rms_norm(f32(x) + b * width, e - b, width, weight.data(), weight.type, eps, f32(out) + b * width);
  });
}

void cpu_backend::add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                               const tensor& out) {
  const int64_t width = host.add_rms_norm(residual, delta, weight, out), n = residual.numel();
  // The unfused order of the forward pass (residual add, then the next layer's norm), so results stay identical.
  for_rows(pool_, n / width, [&](int64_t b, int64_t e) {
    cpu::add_inplace(f32(residual) + b * width, f32(delta) + b * width, (e - b) * width);
    cpu::rms_norm(f32(residual) + b * width, e - b, width, weight.data(), weight.type, eps, f32(out) + b * width);
  });
}

void cpu_backend::matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) {
  const backend_checks::linear_dims d = host.matmul(x, w, bias, y, true);
  if (is_quantized_layout(w.layout)) {
    const quantized_target target{&panels_of(w), bias.empty() ? nullptr : f32(bias), f32(y)};
    cpu::matmul_quantized(f32(x), d.n_tokens, d.n_in, std::span{&target, 1}, pool_);
    return;
  }
  const matmul_target target{w.data(), w.type,
                             d.n_out,  bias.empty() ? nullptr : f32(bias),
                             f32(y),   is_panels(w.layout),
                             w.buf,    w.layout == tensor_layout::cpu_bf16_compact_panels};
  cpu::matmul_group(f32(x), d.n_tokens, d.n_in, std::span{&target, 1}, pool_);
}

void cpu_backend::matmul_group(const tensor& x, std::span<const linear_out> outs) {
  ACTORLLM_CHECK(outs.size() <= 8, "matmul_group: at most 8 outputs");
  // Quantized weights (one region for all of them, the input rounded or quantized once) and the others apart.
  std::array<matmul_target, 8> targets{};
  std::array<quantized_target, 8> quantized{};
  size_t n_plain = 0, n_quantized = 0;
  backend_checks::linear_dims d{};
  for (size_t i = 0; i < outs.size(); ++i) {
    const linear_out& o = outs[i];
    d = host.matmul(x, o.w, o.bias, o.y, true);
    for (size_t j = 0; j < i; ++j)
      check_disjoint(o.y, outs[j].y, "matmul_group", "two outputs");
    const float* bias = o.bias.empty() ? nullptr : f32(o.bias);
    if (is_quantized_layout(o.w.layout))
      quantized[n_quantized++] = quantized_target{&panels_of(o.w), bias, f32(o.y)};
    else
      targets[n_plain++] = matmul_target{o.w.data(), o.w.type,
                                         d.n_out,    bias,
                                         f32(o.y),   is_panels(o.w.layout),
                                         o.w.buf,    o.w.layout == tensor_layout::cpu_bf16_compact_panels};
  }
  if (n_quantized != 0)
    cpu::matmul_quantized(f32(x), d.n_tokens, d.n_in, std::span{quantized.data(), n_quantized}, pool_);
  if (n_plain != 0)
    cpu::matmul_group(f32(x), d.n_tokens, d.n_in, std::span{targets.data(), n_plain}, pool_);
}

void cpu_backend::matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                                   const tensor& out) {
  const backend_checks::linear_dims d = host.matmul(x, w_gate, tensor{}, out, true);
  host.matmul(x, w_up, tensor{}, up, true);
  ACTORLLM_CHECK(
      w_gate.type == w_up.type && w_gate.shape == w_up.shape && w_gate.layout == w_up.layout,
      fmt::format("matmul_silu_gate: w_gate {} and w_up {} differ", w_gate.describe(), w_up.describe()).c_str());
  check_disjoint(up, out, "matmul_silu_gate", "up and out");
  if (is_quantized_layout(w_gate.layout)) {
    cpu::matmul_quantized_silu_gate(f32(x), d.n_tokens, d.n_in, panels_of(w_gate), panels_of(w_up), f32(up), f32(out),
                                    pool_);
    return;
  }
  cpu::matmul_silu_gate(f32(x), d.n_tokens, d.n_in, w_gate.data(), w_up.data(), w_gate.type, is_panels(w_gate.layout),
                        w_gate.layout == tensor_layout::cpu_bf16_compact_panels, d.n_out, f32(up), f32(out), pool_,
                        cpu::matmul_path::automatic, w_gate.buf, w_up.buf);
}

rope_table cpu_backend::make_rope_table(const rope_config& cfg) {
  std::vector<float> inv = rope_inv_freq(cfg);
  rope_table t;
  t.head_dim = cfg.head_dim;
  t.inv_freq = make_host_tensor(dtype::f32, {static_cast<int64_t>(inv.size())});
  std::memcpy(t.inv_freq.data(), inv.data(), inv.size() * sizeof(float));
  return t;
}

void cpu_backend::rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                       const tensor& q_norm, const tensor& k_norm, float eps) {
  const backend_checks::rope_dims d = host.rope(table, positions, q, k, q_norm, k_norm);
  if (d.n_tokens == 0)
    return;
  for_rows(pool_, d.n_tokens, [&](int64_t b, int64_t e) {
    const int64_t q_row = d.n_head * d.head_dim, k_row = d.n_head_kv * d.head_dim;
    float* qb = f32(q) + b * q_row;
    float* kb = k.empty() ? nullptr : f32(k) + b * k_row;
    // Qwen3's per-head q/k norm, done in place right before the rotation as the forward pass did.
    if (!q_norm.empty())
      cpu::rms_norm(qb, (e - b) * d.n_head, d.head_dim, q_norm.data(), q_norm.type, eps, qb);
    if (!k_norm.empty())
      cpu::rms_norm(kb, (e - b) * d.n_head_kv, d.head_dim, k_norm.data(), k_norm.type, eps, kb);
    apply_rope(f32(table.inv_freq), d.head_dim, positions.data_as<int32_t>() + b, e - b, qb, d.n_head, kb, d.n_head_kv);
  });
}

void cpu_backend::write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) {
  host.write_kv(cache, k, v, batch);
  const int64_t row = cache.n_head_kv() * cache.head_dim();
  for_rows(pool_, batch.n_tokens, [&](int64_t b, int64_t e) {
    cpu::write_kv(kv_view(cache), f32(k) + b * row, f32(v) + b * row, batch.slots.data_as<int64_t>() + b, e - b);
  });
}

void cpu_backend::paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                                  int64_t window, const tensor& out) {
  attend(q, batch, cache, scale, window, out, host.paged_attention(q, batch, cache, out), nullptr);
}

void cpu_backend::rope_write_kv_attention(const rope_table& table, const tensor& positions, const tensor& q,
                                          const tensor& k, const tensor& q_norm, const tensor& k_norm, float eps,
                                          const kv_layer& cache, const tensor& v, const attention_batch& batch,
                                          float scale, int64_t window, const tensor& out) {
  // Decode rows only (one query row per sequence, each written to its own slot): a prefill chunk's rows read the keys
  // of the chunk's earlier rows, which other items would be writing.
  bool decode_rows = !k.empty() && batch.kv_layout.plain() && batch.n_tokens > 0 && batch.n_seqs == batch.n_tokens &&
                     batch.host_seqs.size() == static_cast<size_t>(batch.n_seqs) * 4;
  for (int64_t s = 0; decode_rows && s < batch.n_seqs; ++s)
    decode_rows = batch.host_seqs[static_cast<size_t>(s) * 4 + 1] == 1;
  if (!decode_rows) {
    backend::rope_write_kv_attention(table, positions, q, k, q_norm, k_norm, eps, cache, v, batch, scale, window, out);
    return;
  }
  const backend_checks::rope_dims d = host.rope(table, positions, q, k, q_norm, k_norm);
  host.write_kv(cache, k, v, batch);
  const int64_t n_head = host.paged_attention(q, batch, cache, out);
  ACTORLLM_CHECK(
      d.n_tokens == batch.n_tokens,
      fmt::format("rope_write_kv_attention: {} rope positions for a batch of {} rows", d.n_tokens, batch.n_tokens)
          .c_str());
  const int64_t half = d.head_dim / 2;
  rope_cos_.resize(static_cast<size_t>(d.n_tokens * half));
  rope_sin_.resize(static_cast<size_t>(d.n_tokens * half));
  for (int64_t r = 0; r < d.n_tokens; ++r)
    cpu::rope_angles(f32(table.inv_freq), d.head_dim, positions.data_as<int32_t>()[r], rope_cos_.data() + r * half,
                     rope_sin_.data() + r * half);
  const cpu::decode_rope_write rope_write{.q = f32(q),
                                          .k = f32(k),
                                          .v = f32(v),
                                          .slots = batch.slots.data_as<int64_t>(),
                                          .cos = rope_cos_.data(),
                                          .sin = rope_sin_.data(),
                                          .q_norm = q_norm.empty() ? nullptr : q_norm.data(),
                                          .q_norm_type = q_norm.empty() ? dtype::f32 : q_norm.type,
                                          .k_norm = k_norm.empty() ? nullptr : k_norm.data(),
                                          .k_norm_type = k_norm.empty() ? dtype::f32 : k_norm.type,
                                          .eps = eps};
  attend(q, batch, cache, scale, window, out, n_head, nullptr, &rope_write);
}

void cpu_backend::paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache,
                                          float scale, int64_t window, const tensor& out, const tensor& lse) {
  attend(q, batch, cache, scale, window, out, host.paged_attention_partial(q, batch, cache, out, lse), f32(lse));
}

void cpu_backend::merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                           const tensor& out) {
  const int64_t n_head_all = host.merge_attention_partials(parts, lses, n_parts, head_begin, out);
  const int64_t n_tokens = out.dim(0), n_head = out.dim(1), hd = out.dim(2);
  for_rows(pool_, n_tokens, [&](int64_t b, int64_t e) {
    cpu::merge_attention_partials(f32(parts), f32(lses), n_parts, n_tokens, n_head_all, head_begin, n_head, hd,
                                  f32(out), b, e);
  });
}

void cpu_backend::attend(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                         int64_t window, const tensor& out, int64_t n_head, float* lse,
                         const cpu::decode_rope_write* rope_write) {
  const int64_t n_tokens = batch.n_tokens, n_seqs = batch.n_seqs;
  if (n_tokens == 0)
    return;
  const auto n_table = static_cast<int64_t>(batch.host_block_tables.size());
  seqs_.resize(static_cast<size_t>(n_seqs));
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t* e = batch.host_seqs.data() + s * 4;
    ACTORLLM_CHECK(e[0] >= 0 && e[1] >= 0 && e[0] + static_cast<int64_t>(e[1]) <= n_tokens && e[2] >= 0 && e[3] >= 0 &&
                       e[2] + static_cast<int64_t>(e[3]) <= n_table,
                   fmt::format("paged_attention: sequence {} (rows {}+{}, blocks {}+{}) outside the batch ({} rows, "
                               "{} block-table entries)",
                               s, e[0], e[1], e[2], e[3], n_tokens, n_table)
                       .c_str());
    seqs_[static_cast<size_t>(s)] = attention_seq{e[0], e[1], batch.host_block_tables.data() + e[2], e[3]};
  }
  cpu::paged_attention(f32(q), batch.positions.data_as<int32_t>(), seqs_.data(), n_seqs, kv_view(cache), n_head, scale,
                       f32(out), pool_, window, batch.kv_layout, lse, rope_write);
}

void cpu_backend::silu_mul(const tensor& gate, const tensor& up, const tensor& out) {
  host.silu_mul(gate, up, out);
  cpu::silu_mul(f32(gate), f32(up), gate.numel(), f32(out));
}

void cpu_backend::silu_mul_stacked(const tensor& gate_up, const tensor& out) {
  const int64_t ff = host.silu_mul_stacked(gate_up, out);
  // Row by row: each row's gate and up halves are contiguous runs of ff (silu_mul's values, element for element); a
  // bf16 out gets each row rounded once from f32.
  const bool to_bf16 = out.type == dtype::bf16;
  for_rows(pool_, out.dim(0), [&](int64_t b, int64_t e) {
    std::vector<float> row(to_bf16 ? static_cast<size_t>(ff) : 0);
    for (int64_t r = b; r < e; ++r) {
      float* dst = to_bf16 ? row.data() : f32(out) + r * ff;
      cpu::silu_mul(f32(gate_up) + r * 2 * ff, f32(gate_up) + r * 2 * ff + ff, ff, dst);
      if (to_bf16)
        cpu::convert_from_f32(dst, ff, dtype::bf16, out.data_as<uint16_t>() + r * ff);
    }
  });
}

void cpu_backend::matmul_silu_stacked(const tensor& x, const tensor& gate_up, const tensor& wide, const tensor& out) {
  const backend_checks::linear_dims d = host.matmul(x, gate_up, tensor{}, wide, true);
  if (out.type == dtype::bf16) {  // the matmul, then silu_mul_stacked's rounding (the CPU's matmuls read f32 x)
    backend::matmul_silu_stacked(x, gate_up, wide, out);
    return;
  }
  check_host(out, dtype::f32, "matmul_silu_stacked", "out");
  ACTORLLM_CHECK(d.n_out % 2 == 0 && out.numel() == d.n_tokens * d.n_out / 2,
                 fmt::format("matmul_silu_stacked: out {} must be [{}, {}] for gate|up {}", out.describe(), d.n_tokens,
                             d.n_out / 2, gate_up.describe())
                     .c_str());
  check_disjoint(out, wide, "matmul_silu_stacked", "out and wide");
  check_disjoint(out, x, "matmul_silu_stacked", "out and x");
  const int64_t n_ff = d.n_out / 2;
  // Packed panels with gate's rows whole panels (as packs_in_place stacks them): up's panels begin where gate's end,
  // and the two halves run as one gated pair that writes silu(gate) * up as it goes (no second pass over wide).
  if (!is_panels(gate_up.layout) || n_ff % panel_rows != 0) {
    backend::matmul_silu_stacked(x, gate_up, wide, out);
    return;
  }
  const bool compact = gate_up.layout == tensor_layout::cpu_bf16_compact_panels;
  const auto* gate = gate_up.data_as<uint8_t>();
  const uint8_t* up =
      compact ? cpu::compact_panel(gate, n_ff / panel_rows) : gate + cpu::bf16_panels_bytes(n_ff, d.n_in);
  cpu::matmul_silu_gate(f32(x), d.n_tokens, d.n_in, gate, up, dtype::bf16, true, compact, n_ff, f32(wide), f32(out),
                        pool_, cpu::matmul_path::automatic, gate_up.buf, gate_up.buf);
}

void cpu_backend::add(const tensor& a, const tensor& b, const tensor& out) {
  check_host(a, dtype::f32, "add", "a");
  check_host(b, dtype::f32, "add", "b");
  check_host(out, dtype::f32, "add", "out");
  const int64_t n = a.numel(), width = a.row_size();
  check_numel(out, n, "add", "out");
  const bool full = b.numel() == n;
  ACTORLLM_CHECK(full || b.numel() == width,
                 fmt::format("add: b {} is neither a's shape nor one row of a {}", b.describe(), a.describe()).c_str());
  if (full && same_start(out, b) && !same_start(out, a)) {
    cpu::add_inplace(f32(out), f32(a), n);  // out = b + a: float addition commutes, so this is a + b exactly
    return;
  }
  if (!same_start(out, a)) {
    check_disjoint(out, a, "add", "out and a (unless equal)");
    check_disjoint(out, b, "add", "out and b (unless equal)");
    std::memcpy(out.data(), a.data(), a.nbytes());
  }
  if (full) {
    cpu::add_inplace(f32(out), f32(b), n);
  } else if (width > 0) {
    for (int64_t r = 0; r < a.rows(); ++r)
      cpu::add_inplace(f32(out) + r * width, f32(b), width);
  }
}

void cpu_backend::gather_rows(const tensor& x, const tensor& rows, const tensor& out) {
  const int64_t width = host.gather_rows(x, rows, out), n = x.rows(), m = rows.numel();
  const int32_t* idx = rows.data_as<int32_t>();
  for (int64_t i = 0; i < m; ++i) {
    ACTORLLM_CHECK(idx[i] >= 0 && idx[i] < n,
                   fmt::format("gather_rows: row {} of {} is outside x {}", idx[i], i, x.describe()).c_str());
    std::memcpy(f32(out) + i * width, f32(x) + idx[i] * width, static_cast<size_t>(width) * sizeof(float));
  }
}

void cpu_backend::lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots,
                           const tensor& shrunk, const tensor& y) {
  const backend_checks::lora_dims d = host.lora_add(x, a, b, row_slots, shrunk, y);
  const int32_t* slots = row_slots.data_as<int32_t>();
  for (int64_t t = 0; t < d.n; ++t)
    ACTORLLM_CHECK(slots[t] < d.n_slots,
                   fmt::format("lora_add: row {} names slot {} of a stack of {}", t, slots[t], d.n_slots).c_str());
  cpu::lora_add(f32(x), f32(a), f32(b), slots, cpu::lora_shape{d.n, d.n_in, d.n_out, d.n_slots, d.rank}, f32(shrunk),
                f32(y), pool_);
}

void cpu_backend::copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) {
  host.copy_columns(src, src_col, dst, dst_col, n_cols);
  const int64_t sw = src.dim(1), dw = dst.dim(1);
  for (int64_t r = 0; r < src.dim(0); ++r)  // memmove: src and dst may be one tensor
    std::memmove(f32(dst) + r * dw + dst_col, f32(src) + r * sw + src_col, static_cast<size_t>(n_cols) * sizeof(float));
}

void cpu_backend::split_columns(const tensor& src, std::span<const tensor> dsts) {
  host.split_columns(src, dsts);
  const int64_t width = src.dim(1);
  for_rows(pool_, src.dim(0), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* row = f32(src) + r * width;
      for (const tensor& d : dsts) {
        const int64_t w = d.dim(1);
        std::memcpy(f32(d) + r * w, row, static_cast<size_t>(w) * sizeof(float));
        row += w;
      }
    }
  });
}

void cpu_backend::sample(const tensor& logits, std::span<const ops::sample_row> rows,
                         std::span<ops::sample_result> out) {
  check_host(logits, dtype::f32, "sample", "logits");
  const auto n = static_cast<int64_t>(rows.size());
  ACTORLLM_CHECK(logits.shape.n_dims == 2 && logits.dim(0) == n,
                 fmt::format("sample: logits {} must be [{}, n_vocab]", logits.describe(), n).c_str());
  ACTORLLM_CHECK(out.size() == rows.size(),
                 fmt::format("sample: {} results for {} rows", out.size(), rows.size()).c_str());
  for (const sample_row& r : rows)
    ACTORLLM_CHECK(r.params != nullptr && r.rng != nullptr, "sample: a row without params or generator");
  const int64_t n_vocab = logits.dim(1);
  float* base = f32(logits);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const sample_row& r = rows[static_cast<size_t>(i)];
      out[static_cast<size_t>(i)] =
          cpu::sample(base + i * n_vocab, n_vocab, *r.params, r.prompt_ids, r.output_ids, *r.rng, r.allowed_mask);
    }
  };
  // Rows are independent (own logits, own generator; cpu::sample's scratch is thread_local), so they may run in
  // parallel with results that do not depend on the thread count. Rows sharing a generator draw from it in row
  // order, so such a batch runs serially.
  bool shared_rng = false;
  if (n > 1) {
    rng_seen_.clear();
    for (const sample_row& r : rows)
      rng_seen_.push_back(r.rng);
    std::sort(rng_seen_.begin(), rng_seen_.end(), std::less<const void*>());
    shared_rng = std::adjacent_find(rng_seen_.begin(), rng_seen_.end()) != rng_seen_.end();
  }
  if (n <= 1 || shared_rng || pool_.size() == 1)
    run(0, n);
  else
    pool_.parallel_for_dynamic(n, 1, run);
}

}  // namespace actorllm::cpu
