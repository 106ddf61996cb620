// An owned host tensor: the unit the weight loader hands to the forward pass.
#pragma once

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace actorllm::model {

/// An owned, 64-byte-aligned, row-major host tensor; for weights, this shard's slice of the full tensor.
struct host_tensor {
  dtype type = dtype::f32;
  std::vector<int64_t> shape;  ///< the slice's shape
  int64_t row_offset = 0;      ///< for a vocab slice: the full tensor's row this slice starts at

  host_tensor() = default;
  /// Allocates uninitialised storage for `shape` elements of `type`.
  host_tensor(dtype t, std::vector<int64_t> s);

  const void* data() const { return storage_.get(); }
  void* data() { return storage_.get(); }
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
  size_t nbytes_ = 0;
};

}  // namespace actorllm::model
