// An owned host tensor: the unit the weight loader hands to the forward pass.
#pragma once

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace actorllm::model {

/// A row-major host tensor; for weights, this shard's slice of the full tensor. Either owned (64-byte-aligned storage
/// of its own) or a view of memory another object owns: a weight the loader uses in place in the checkpoint's file
/// mapping, which the view keeps alive. The mutable data() of a view first copies it into storage of its own (copy
/// on write), so a writer owns what it writes; a reader should use the const one.
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

  const void* data() const { return view_ != nullptr ? view_ : storage_.get(); }
  /// The storage to write; a view becomes an owned copy first.
  void* data();
  /// Whether this is a view of memory it does not own (nothing was copied).
  bool is_view() const { return view_ != nullptr; }
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
  std::unique_ptr<std::byte[], free_deleter> storage_;
  const void* view_ = nullptr;         // a view's data, in memory owner_ keeps alive
  std::shared_ptr<const void> owner_;  // a view's keeper
  std::optional<file_origin> origin_;  // a view's place in its file, when it has one
  size_t nbytes_ = 0;
};

}  // namespace actorllm::model
