// The argument checks every backend runs before an op: where a tensor lives, its type and size, overlaps, the KV
// cache's shape. They run about ten times per layer per decode step, so each is a few compares, inline, and formats
// its message (naming the op, the argument and what was wrong) only when it fails; a failure aborts
// (ACTORLLM_CHECK), since a bad argument here is a bug in the caller, not bad input.
#pragma once

#include "kernels/backend.hpp"
#include "util/check.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace actorllm {

/// True when the bytes of a and b intersect.
inline bool tensors_overlap(const tensor& a, const tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes() && a.nbytes() != 0 && b.nbytes() != 0;
}

/// True when a and b start at the same address (an op's permitted in-place form).
inline bool same_start(const tensor& a, const tensor& b) { return a.data() == b.data(); }

/// The checks of one backend, whose tensors live on `dev`.
struct backend_checks {
  device dev;

  /// `t` is a tensor on this backend's device that lies inside its buffer.
  void on_device(const tensor& t, const char* op, const char* arg) const {
    ACTORLLM_CHECK(!t.empty(), fmt::format("{}: {} is an empty tensor", op, arg).c_str());
    ACTORLLM_CHECK(t.where() == dev,
                   fmt::format("{}: {} must be on {}, got {}", op, arg, dev.to_string(), t.describe()).c_str());
    ACTORLLM_CHECK(t.offset + t.nbytes() <= t.buf->size(),
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
  /// on_device, and a weight type (f32, f16 or bf16).
  void weight(const tensor& t, const char* op, const char* arg) const {
    on_device(t, op, arg);
    ACTORLLM_CHECK(is_float_dtype(t.type),
                   fmt::format("{}: {} must be f32, f16 or bf16, got {}", op, arg, t.describe()).c_str());
  }
  /// The KV cache's k and v: f32 on this device, both [n_blocks, block_size, n_head_kv, head_dim].
  void kv_cache(const kv_layer& cache, const char* op) const {
    on_device(cache.k, dtype::f32, op, "cache.k");
    on_device(cache.v, dtype::f32, op, "cache.v");
    ACTORLLM_CHECK(cache.k.shape.n_dims == 4 && cache.k.shape == cache.v.shape && cache.block_size() > 0 &&
                       cache.n_head_kv() > 0 && cache.head_dim() > 0,
                   fmt::format("{}: cache k and v must both be [n_blocks, block_size, n_head_kv, head_dim], got {} "
                               "and {}",
                               op, cache.k.describe(), cache.v.describe())
                       .c_str());
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
