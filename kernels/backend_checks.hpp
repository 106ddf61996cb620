// The argument checks every backend runs before an op: where a tensor lives, its type and size, overlaps, the KV
// cache's shape. They run about ten times per layer per decode step, so each is a few compares, inline, and formats
// its message (naming the op, the argument and what was wrong) only when it fails; a failure aborts
// (ACTORLLM_CHECK), since a bad argument here is a bug in the caller, not bad input.
#pragma once

#include "kernels/backend.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "util/check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <span>

namespace actorllm {

/// True when the bytes of a and b intersect.
inline bool tensors_overlap(const tensor& a, const tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes() && a.nbytes() != 0 && b.nbytes() != 0;
}

/// True for the layouts of quantized weights (backend::import_quantized_linear), whose buffer holds codes and scales
/// in a backend's own order: their bytes are the buffer's size, not numel() times the (logical) element size.
inline bool is_quantized_layout(tensor_layout l) {
  return l == tensor_layout::cpu_q8 || l == tensor_layout::cpu_q4 || l == tensor_layout::cuda_q8 ||
         l == tensor_layout::cuda_q4;
}

/// True when a and b start at the same address (an op's permitted in-place form).
inline bool same_start(const tensor& a, const tensor& b) { return a.data() == b.data(); }

/// The checks of one backend, whose tensors live on `dev`.
struct backend_checks {
  device dev;

  /// `t` is a row-major tensor (or, where `packed_ok`, a packed weight) on this backend's device that lies inside its
  /// buffer.
  void on_device(const tensor& t, const char* op, const char* arg, bool packed_ok = false) const {
    ACTORLLM_CHECK(!t.empty(), fmt::format("{}: {} is an empty tensor", op, arg).c_str());
    ACTORLLM_CHECK(
        packed_ok || t.layout == tensor_layout::row_major,
        fmt::format("{}: {} is a packed weight ({}), which only this backend's matmul reads", op, arg, t.describe())
            .c_str());
    ACTORLLM_CHECK(t.where() == dev,
                   fmt::format("{}: {} must be on {}, got {}", op, arg, dev.to_string(), t.describe()).c_str());
    // (Quantized weights and compact panels take fewer bytes than their shape and type say, all from the start.)
    const bool sized_apart = is_quantized_layout(t.layout) || t.layout == tensor_layout::cpu_bf16_compact_panels;
    ACTORLLM_CHECK(sized_apart ? t.offset == 0 : t.offset + t.nbytes() <= t.buf->size(),
                   fmt::format("{}: {} ({} at byte {}) runs past the end of its {}-byte buffer", op, arg, t.describe(),
                               t.offset, t.buf->size())
                       .c_str());
  }
  /// on_device, and the element type is `type`.
  void on_device(const tensor& t, dtype type, const char* op, const char* arg) const {
    on_device(t, op, arg);
    ACTORLLM_CHECK(t.type == type,
                   fmt::format("{}: {} must be {}, got {}", op, arg, dtype_name(type), t.describe()).c_str());
  }
  /// on_device, of type f32 or `also` (an activation a backend takes in a GEMM's input type as well; `also` f32:
  /// f32 only).
  void activation(const tensor& t, dtype also, const char* op, const char* arg) const {
    on_device(t, op, arg);
    ACTORLLM_CHECK(
        t.type == dtype::f32 || t.type == also,
        (also == dtype::f32 ? fmt::format("{}: {} must be f32, got {}", op, arg, t.describe())
                            : fmt::format("{}: {} must be f32 or {}, got {}", op, arg, dtype_name(also), t.describe()))
            .c_str());
  }
  /// on_device, and a weight type (f32, f16 or bf16).
  void weight(const tensor& t, const char* op, const char* arg, bool packed_ok = false) const {
    on_device(t, op, arg, packed_ok);
    ACTORLLM_CHECK(is_float_dtype(t.type),
                   fmt::format("{}: {} must be f32, f16 or bf16, got {}", op, arg, t.describe()).c_str());
  }
  /// The KV cache's k and v: on this device, of one element type it stores (kv_cache_dtype_unsupported), both
  /// [n_blocks, block_size, n_head_kv, head_dim], with positive finite scales.
  void kv_cache(const kv_layer& cache, const char* op) const {
    on_device(cache.k, op, "cache.k");
    on_device(cache.v, cache.k.type, op, "cache.v");  // k's type
    const dtype t = cache.k.type;
    if (t != dtype::f32 && t != dtype::bf16 && t != dtype::f16) [[unlikely]]
      if (std::string why = kv_cache_dtype_unsupported(t, dev.kind); !why.empty())
        ACTORLLM_CHECK(false, fmt::format("{}: {}", op, why).c_str());
    ACTORLLM_CHECK(
        cache.k_scale > 0 && cache.v_scale > 0 && std::isfinite(cache.k_scale) && std::isfinite(cache.v_scale),
        fmt::format("{}: cache scales must be positive and finite, got k {} v {}", op, cache.k_scale, cache.v_scale)
            .c_str());
    ACTORLLM_CHECK(cache.k.shape.n_dims == 4 && cache.k.shape == cache.v.shape && cache.block_size() > 0 &&
                       cache.n_head_kv() > 0 && cache.head_dim() > 0,
                   fmt::format("{}: cache k and v must both be [n_blocks, block_size, n_head_kv, head_dim], got {} "
                               "and {}",
                               op, cache.k.describe(), cache.v.describe())
                       .c_str());
  }
  // ---- one op's arguments, checked and turned into its dimensions (the semantics of kernels/backend.hpp) ----------

  /// embedding: ids i32, table a 2-D weight, out f32 [ids, n_embd]. Returns n_embd.
  int64_t embedding(const tensor& ids, const tensor& table, const tensor& out) const {
    on_device(ids, dtype::i32, "embedding", "ids");
    weight(table, "embedding", "table");
    on_device(out, dtype::f32, "embedding", "out");
    ACTORLLM_CHECK(table.shape.n_dims == 2,
                   fmt::format("embedding: table must be [rows, n_embd], got {}", table.describe()).c_str());
    numel(out, ids.numel() * table.dim(1), "embedding", "out");
    return table.dim(1);
  }
  /// rms_norm: x f32 and out f32 (or `out_also`) rows of the weight's width (out equal to x, when both are f32, or
  /// apart from it). Returns the width.
  int64_t rms_norm(const tensor& x, const tensor& w, const tensor& out, dtype out_also = dtype::f32) const {
    on_device(x, dtype::f32, "rms_norm", "x");
    weight(w, "rms_norm", "weight");
    activation(out, out_also, "rms_norm", "out");
    const int64_t width = w.numel();
    ACTORLLM_CHECK(width > 0 && x.numel() % width == 0,
                   fmt::format("rms_norm: {} is not made of rows of the weight's {}", x.describe(), width).c_str());
    numel(out, x.numel(), "rms_norm", "out");
    if (!same_start(x, out) || out.type != x.type)
      disjoint(x, out, "rms_norm", "x and out (unless equal)");
    return width;
  }
  /// add_rms_norm: residual, delta and out f32 (out also `out_also`) of equal size in rows of the weight's width;
  /// out apart from both. Returns the width.
  int64_t add_rms_norm(const tensor& residual, const tensor& delta, const tensor& w, const tensor& out,
                       dtype out_also = dtype::f32) const {
    on_device(residual, dtype::f32, "add_rms_norm", "residual");
    on_device(delta, dtype::f32, "add_rms_norm", "delta");
    weight(w, "add_rms_norm", "weight");
    activation(out, out_also, "add_rms_norm", "out");
    const int64_t n = residual.numel(), width = w.numel();
    ACTORLLM_CHECK(
        width > 0 && n % width == 0,
        fmt::format("add_rms_norm: {} is not made of rows of the weight's {}", residual.describe(), width).c_str());
    numel(delta, n, "add_rms_norm", "delta");
    numel(out, n, "add_rms_norm", "out");
    disjoint(out, residual, "add_rms_norm", "out and residual");
    disjoint(out, delta, "add_rms_norm", "out and delta");
    return width;
  }
  /// matmul's dimensions.
  struct linear_dims {
    int64_t n_tokens, n_in, n_out;
  };
  /// matmul: x f32 [n_tokens, n_in] (or `x_also`, which the caller has checked the weight takes), w [n_out, n_in]
  /// (packed only where `packed_ok`: the backend made it), bias f32 [n_out] or empty, y f32 [n_tokens, n_out] apart
  /// from x.
  linear_dims matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y, bool packed_ok = false,
                     dtype x_also = dtype::f32) const {
    activation(x, x_also, "matmul", "x");
    weight(w, "matmul", "w", packed_ok);
    on_device(y, dtype::f32, "matmul", "y");
    ACTORLLM_CHECK(w.shape.n_dims == 2, fmt::format("matmul: w must be [n_out, n_in], got {}", w.describe()).c_str());
    const linear_dims d{x.rows(), w.dim(1), w.dim(0)};
    ACTORLLM_CHECK(x.numel() == d.n_tokens * d.n_in,
                   fmt::format("matmul: x {} does not match w {}", x.describe(), w.describe()).c_str());
    ACTORLLM_CHECK(y.numel() == d.n_tokens * d.n_out,
                   fmt::format("matmul: y {} must be [{}, {}]", y.describe(), d.n_tokens, d.n_out).c_str());
    if (!bias.empty()) {
      on_device(bias, dtype::f32, "matmul", "bias");
      numel(bias, d.n_out, "matmul", "bias");
    }
    disjoint(x, y, "matmul", "x and y");
    return d;
  }
  /// rope's dimensions (n_tokens 0: nothing to rotate, the rest unchecked).
  struct rope_dims {
    int64_t n_tokens = 0, head_dim = 0, n_head = 0, n_head_kv = 0;
  };
  /// rope: the table's head_dim, q [n_tokens, n_head, head_dim] and k [n_tokens, n_head_kv, head_dim] (or empty)
  /// f32 and apart, q_norm / k_norm weights of head_dim (k_norm only with k).
  rope_dims rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k,
                 const tensor& q_norm, const tensor& k_norm) const {
    rope_dims d;
    d.head_dim = table.head_dim;
    const int64_t hd = d.head_dim;
    on_device(table.inv_freq, dtype::f32, "rope", "table.inv_freq");
    ACTORLLM_CHECK(hd > 0 && hd % 2 == 0 && table.inv_freq.numel() == hd / 2,
                   fmt::format("rope: table of head_dim {} holds {}", hd, table.inv_freq.describe()).c_str());
    on_device(positions, dtype::i32, "rope", "positions");
    on_device(q, dtype::f32, "rope", "q");
    d.n_tokens = positions.numel();
    if (d.n_tokens == 0)
      return d;
    const int64_t token_q = q.numel() / d.n_tokens;
    ACTORLLM_CHECK(q.numel() % d.n_tokens == 0 && token_q % hd == 0,
                   fmt::format("rope: q {} is not [{}, n_head, {}]", q.describe(), d.n_tokens, hd).c_str());
    d.n_head = token_q / hd;
    if (!k.empty()) {
      on_device(k, dtype::f32, "rope", "k");
      const int64_t token_k = k.numel() / d.n_tokens;
      ACTORLLM_CHECK(k.numel() % d.n_tokens == 0 && token_k % hd == 0,
                     fmt::format("rope: k {} is not [{}, n_head_kv, {}]", k.describe(), d.n_tokens, hd).c_str());
      d.n_head_kv = token_k / hd;
      disjoint(q, k, "rope", "q and k");
    }
    if (!q_norm.empty()) {
      weight(q_norm, "rope", "q_norm");
      numel(q_norm, hd, "rope", "q_norm");
    }
    if (!k_norm.empty()) {
      ACTORLLM_CHECK(!k.empty(), "rope: k_norm given without k");
      weight(k_norm, "rope", "k_norm");
      numel(k_norm, hd, "rope", "k_norm");
    }
    return d;
  }
  /// write_kv: k and v f32 [n_tokens, n_head_kv, head_dim] of the cache, slots i64 [n_tokens].
  void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) const {
    kv_cache(cache, "write_kv");
    const int64_t row = cache.n_head_kv() * cache.head_dim();
    on_device(k, dtype::f32, "write_kv", "k");
    on_device(v, dtype::f32, "write_kv", "v");
    on_device(batch.slots, dtype::i64, "write_kv", "batch.slots");
    numel(k, batch.n_tokens * row, "write_kv", "k");
    numel(v, batch.n_tokens * row, "write_kv", "v");
    numel(batch.slots, batch.n_tokens, "write_kv", "batch.slots");
  }
  /// paged_attention: the cache, q and out f32 [n_tokens, n_head, head_dim] and apart (n_head a multiple of the
  /// cache's kv heads), positions i32 [n_tokens], host_seqs 4 ints per sequence. Returns n_head (0 for no tokens).
  int64_t paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache,
                          const tensor& out) const {
    kv_cache(cache, "paged_attention");
    const int64_t n_tokens = batch.n_tokens, hd = cache.head_dim();
    on_device(q, dtype::f32, "paged_attention", "q");
    on_device(out, dtype::f32, "paged_attention", "out");
    on_device(batch.positions, dtype::i32, "paged_attention", "batch.positions");
    numel(batch.positions, n_tokens, "paged_attention", "batch.positions");
    if (n_tokens == 0)
      return 0;
    const int64_t n_head = q.numel() / (n_tokens * hd);
    ACTORLLM_CHECK(q.numel() == n_tokens * n_head * hd && n_head > 0 && n_head % cache.n_head_kv() == 0,
                   fmt::format("paged_attention: q {} is not [{}, n_head, {}] with n_head a multiple of {}",
                               q.describe(), n_tokens, hd, cache.n_head_kv())
                       .c_str());
    numel(out, q.numel(), "paged_attention", "out");
    disjoint(q, out, "paged_attention", "q and out");
    ACTORLLM_CHECK(batch.n_seqs >= 0 && batch.host_seqs.size() == static_cast<size_t>(batch.n_seqs) * 4,
                   fmt::format("paged_attention: host_seqs holds {} ints for {} sequences (4 each)",
                               batch.host_seqs.size(), batch.n_seqs)
                       .c_str());
    return n_head;
  }
  /// paged_attention_partial: paged_attention's checks, and lse f32 [n_tokens, n_head]. Returns n_head.
  int64_t paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache,
                                  const tensor& out, const tensor& lse) const {
    const int64_t n_head = paged_attention(q, batch, cache, out);
    on_device(lse, dtype::f32, "paged_attention_partial", "lse");
    numel(lse, batch.n_tokens * n_head, "paged_attention_partial", "lse");
    const kv_shard_layout& l = batch.kv_layout;
    ACTORLLM_CHECK(l.n_shards >= 1 && l.shard >= 0 && l.shard < l.n_shards && l.interleave >= 1 &&
                       cache.block_size() % l.interleave == 0,
                   fmt::format("paged_attention_partial: kv layout shard {} of {} (interleave {}) does not fit blocks "
                               "of {}",
                               l.shard, l.n_shards, l.interleave, cache.block_size())
                       .c_str());
    return n_head;
  }
  /// merge_attention_partials: out f32 3-D [n_tokens, n_head, head_dim]; lses f32 of n_parts * n_tokens *
  /// n_head_all and parts of head_dim times that; heads [head_begin, head_begin + n_head) within n_head_all.
  /// Returns n_head_all.
  int64_t merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                   const tensor& out) const {
    on_device(parts, dtype::f32, "merge_attention_partials", "parts");
    on_device(lses, dtype::f32, "merge_attention_partials", "lses");
    on_device(out, dtype::f32, "merge_attention_partials", "out");
    ACTORLLM_CHECK(out.shape.n_dims == 3 && n_parts >= 1,
                   fmt::format("merge_attention_partials: out {} is not [n_tokens, n_head, head_dim] or {} parts",
                               out.describe(), n_parts)
                       .c_str());
    const int64_t n_tokens = out.dim(0), n_head = out.dim(1), hd = out.dim(2);
    const int64_t per_part = n_parts * n_tokens;
    const int64_t n_head_all = per_part > 0 ? lses.numel() / per_part : 0;
    ACTORLLM_CHECK(
        per_part == 0 || (lses.numel() == per_part * n_head_all && parts.numel() == lses.numel() * hd &&
                          head_begin >= 0 && head_begin + n_head <= n_head_all),
        fmt::format("merge_attention_partials: parts {} and lses {} are not {} parts of [{}, n_head_all, {}] "
                    "holding heads {}+{}",
                    parts.describe(), lses.describe(), n_parts, n_tokens, hd, head_begin, n_head)
            .c_str());
    disjoint(parts, out, "merge_attention_partials", "parts and out");
    return n_head_all;
  }
  /// silu_mul: gate, up and out f32 (out also `out_also`, then apart from both) of equal size.
  void silu_mul(const tensor& gate, const tensor& up, const tensor& out, dtype out_also = dtype::f32) const {
    on_device(gate, dtype::f32, "silu_mul", "gate");
    on_device(up, dtype::f32, "silu_mul", "up");
    activation(out, out_also, "silu_mul", "out");
    numel(up, gate.numel(), "silu_mul", "up");
    numel(out, gate.numel(), "silu_mul", "out");
    if (out.type != dtype::f32) {
      disjoint(out, gate, "silu_mul", "out (not f32) and gate");
      disjoint(out, up, "silu_mul", "out (not f32) and up");
    }
  }
  /// silu_mul_stacked: gate_up f32 [n, 2 * n_ff], out f32 or bf16 [n, n_ff] apart from it. Returns n_ff.
  int64_t silu_mul_stacked(const tensor& gate_up, const tensor& out) const {
    on_device(gate_up, dtype::f32, "silu_mul_stacked", "gate_up");
    activation(out, dtype::bf16, "silu_mul_stacked", "out");
    ACTORLLM_CHECK(gate_up.shape.n_dims == 2 && gate_up.dim(1) % 2 == 0 && out.shape.n_dims == 2 &&
                       out.dim(0) == gate_up.dim(0) && out.dim(1) * 2 == gate_up.dim(1),
                   fmt::format("silu_mul_stacked: gate_up {} must be [n, 2 * n_ff] and out {} [n, n_ff]",
                               gate_up.describe(), out.describe())
                       .c_str());
    disjoint(gate_up, out, "silu_mul_stacked", "gate_up and out");
    return out.dim(1);
  }
  /// gather_rows: x f32 [n, width], rows i32 [m], out f32 [m, width] apart from x. Returns the width.
  int64_t gather_rows(const tensor& x, const tensor& rows, const tensor& out) const {
    on_device(x, dtype::f32, "gather_rows", "x");
    on_device(rows, dtype::i32, "gather_rows", "rows");
    on_device(out, dtype::f32, "gather_rows", "out");
    const int64_t width = x.row_size();
    numel(out, rows.numel() * width, "gather_rows", "out");
    disjoint(x, out, "gather_rows", "x and out");
    return width;
  }
  /// split_columns: src f32 [n, W], at most 4 dsts f32 [n, w_p] apart from src, the w_p summing to at most W.
  void split_columns(const tensor& src, std::span<const tensor> dsts) const {
    on_device(src, dtype::f32, "split_columns", "src");
    ACTORLLM_CHECK(
        src.shape.n_dims == 2 && dsts.size() <= 4,
        fmt::format("split_columns: src {} must be 2-D, into at most 4 parts (got {})", src.describe(), dsts.size())
            .c_str());
    int64_t total = 0;
    for (const tensor& d : dsts) {
      on_device(d, dtype::f32, "split_columns", "a part");
      ACTORLLM_CHECK(
          d.shape.n_dims == 2 && d.dim(0) == src.dim(0),
          fmt::format("split_columns: part {} must be 2-D with the rows of src {}", d.describe(), src.describe())
              .c_str());
      disjoint(src, d, "split_columns", "src and a part");
      total += d.dim(1);
    }
    ACTORLLM_CHECK(total <= src.dim(1),
                   fmt::format("split_columns: the parts take {} columns of src {}", total, src.describe()).c_str());
  }
  /// copy_columns: src and dst f32 2-D with equal rows, the columns inside both.
  void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) const {
    on_device(src, dtype::f32, "copy_columns", "src");
    on_device(dst, dtype::f32, "copy_columns", "dst");
    ACTORLLM_CHECK(
        src.shape.n_dims == 2 && dst.shape.n_dims == 2 && src.dim(0) == dst.dim(0),
        fmt::format("copy_columns: src {} and dst {} must be 2-D with equal rows", src.describe(), dst.describe())
            .c_str());
    ACTORLLM_CHECK(
        n_cols >= 0 && src_col >= 0 && src_col + n_cols <= src.dim(1) && dst_col >= 0 && dst_col + n_cols <= dst.dim(1),
        fmt::format("copy_columns: columns [{}, +{}) of {} -> [{}, +{}) of {} out of range", src_col, n_cols,
                    src.describe(), dst_col, n_cols, dst.describe())
            .c_str());
  }

  /// lora_add's shapes, as backend::lora_add states them.
  struct lora_dims {
    int64_t n = 0, n_in = 0, n_out = 0, n_slots = 0, rank = 0;
  };
  lora_dims lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots, const tensor& shrunk,
                     const tensor& y) const {
    on_device(x, dtype::f32, "lora_add", "x");
    on_device(a, dtype::f32, "lora_add", "a");
    on_device(b, dtype::f32, "lora_add", "b");
    on_device(row_slots, dtype::i32, "lora_add", "row_slots");
    on_device(shrunk, dtype::f32, "lora_add", "shrunk");
    on_device(y, dtype::f32, "lora_add", "y");
    ACTORLLM_CHECK(a.shape.n_dims == 3 && b.shape.n_dims == 3 && a.dim(0) == b.dim(0) && a.dim(1) == b.dim(2),
                   fmt::format("lora_add: a {} and b {} must be [slots, rank, n_in] and [slots, n_out, rank]",
                               a.describe(), b.describe())
                       .c_str());
    lora_dims d;
    d.n = row_slots.numel();
    d.n_slots = a.dim(0);
    d.rank = a.dim(1);
    d.n_in = a.dim(2);
    d.n_out = b.dim(1);
    numel(x, d.n * d.n_in, "lora_add", "x");
    numel(shrunk, d.n * d.rank, "lora_add", "shrunk");
    numel(y, d.n * d.n_out, "lora_add", "y");
    disjoint(x, y, "lora_add", "x and y");
    disjoint(shrunk, y, "lora_add", "shrunk and y");
    disjoint(x, shrunk, "lora_add", "x and shrunk");
    return d;
  }

  static void numel(const tensor& t, int64_t n, const char* op, const char* arg) {
    ACTORLLM_CHECK(t.numel() == n,
                   fmt::format("{}: {} must hold {} elements, got {}", op, arg, n, t.describe()).c_str());
  }
  static void disjoint(const tensor& a, const tensor& b, const char* op, const char* what) {
    ACTORLLM_CHECK(!tensors_overlap(a, b), fmt::format("{}: {} must not overlap", op, what).c_str());
  }
};

}  // namespace actorllm
