// An owned host tensor: the unit the weight loader hands to the forward pass.
#pragma once

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace actorllm::model {

/// A row-major host tensor; for weights, this shard's slice of the full tensor. Either owned (64-byte-aligned storage
/// of its own) or a view of memory another object owns: a weight the loader uses in place in the checkpoint's file
/// mapping, which the view keeps alive. The mutable data() of a view first copies it into storage of its own (copy
/// on write), so a writer owns what it writes; a reader should use the const one. A third kind is a deferred copy: a
/// slice the loader cannot use in place (a tensor's columns), copied out of the file mapping the first time anything
/// reads it, so that a backend that finds what it needs by the slice's place in the file (buffer::origin; the CPU's
/// packed-weight cache) never copies it at all.
struct host_tensor {
  dtype type = dtype::f32;
  std::vector<int64_t> shape;  ///< the slice's shape
  int64_t row_offset = 0;      ///< for a vocab slice: the full tensor's row this slice starts at

  host_tensor() = default;
  host_tensor(host_tensor&& other) noexcept { *this = std::move(other); }
  /// Leaves `other` without data (a moved-from view must not point at memory it no longer keeps alive).
  host_tensor& operator=(host_tensor&& other) noexcept {
    if (this != &other) {
      type = other.type;
      shape = std::move(other.shape);
      row_offset = other.row_offset;
      storage_ = std::move(other.storage_);
      deferred_ = std::move(other.deferred_);
      view_ = std::exchange(other.view_, nullptr);
      owner_ = std::move(other.owner_);
      origin_ = std::exchange(other.origin_, std::nullopt);
      nbytes_ = other.nbytes_;
    }
    return *this;
  }
  /// Allocates uninitialised storage for `shape` elements of `type`.
  host_tensor(dtype t, std::vector<int64_t> s);

  /// A view of `data` (shape `s` of `t`, row-major) that keeps `owner` alive as long as it, or the backend tensor
  /// made from it, lives. No copy. `origin`: the file the bytes are in, unchanged (buffer::origin), when they are.
  static host_tensor view(dtype t, std::vector<int64_t> s, const void* data, std::shared_ptr<const void> owner,
                          std::optional<file_origin> origin = std::nullopt);
  /// A deferred copy (shape `s` of `t`): `fill(dst)` writes its nbytes() bytes, once, the first time data() is asked
  /// for, here or of the backend tensor made from it; until then `owner` (what fill reads) is kept alive. `origin`
  /// names the bytes in their file (a strided slice: file_origin::row_stride).
  static host_tensor deferred(dtype t, std::vector<int64_t> s, std::function<void(void* dst)> fill,
                              std::shared_ptr<const void> owner, file_origin origin);

  /// The bytes (a deferred copy is made here, once).
  const void* data() const;
  /// The storage to write; a view becomes an owned copy first.
  void* data();
  /// Whether this is a view of memory it does not own (nothing was copied).
  bool is_view() const { return view_ != nullptr; }
  /// Whether this is a deferred copy not made yet.
  bool is_deferred() const;
  /// A deferred copy's fill and, once made, its bytes (model/tensor.cpp).
  struct deferred_copy;
  /// What a view keeps alive (null for an owned tensor).
  const std::shared_ptr<const void>& view_owner() const { return owner_; }
  /// numel() * dtype_size(type).
  size_t nbytes() const { return nbytes_; }
  /// Product of the shape (1 for a 0-d tensor).
  int64_t numel() const;

  /// Hands the storage to a backend tensor handle of the same type and shape (no copy); this host_tensor is empty
  /// afterwards. How loaded weights enter a backend (backend::import_host).
  tensor into_tensor() &&;

  /// The storage viewed as T; T must match `type` (float for f32, uint16_t for f16/bf16).
  template <class T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }
  template <class T>
  T* data_as() {
    return static_cast<T*>(data());
  }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  using storage = std::unique_ptr<std::byte[], free_deleter>;
  // Uninitialised storage for `bytes` bytes: 64-byte aligned, on transparent huge pages from 2 MiB on.
  static storage allocate(size_t bytes);

  storage storage_;
  std::shared_ptr<deferred_copy> deferred_;  // a deferred copy's fill and, once made, its bytes
  const void* view_ = nullptr;               // a view's data, in memory owner_ keeps alive
  std::shared_ptr<const void> owner_;        // a view's keeper
  std::optional<file_origin> origin_;        // a view's place in its file, when it has one
  size_t nbytes_ = 0;
};

}  // namespace actorllm::model
