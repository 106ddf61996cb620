// Tensor handles of the backend interface: a buffer (memory a backend allocated on its device) and a tensor (dtype,
// shape and a window into a buffer). Handles are cheap to copy; the buffer lives while any handle refers to it.
#pragma once

#include "kernels/device.hpp"
#include "kernels/dtype.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

struct stat;

namespace actorllm {

/// Which file a buffer's bytes are, unchanged, and where in it: the file's identity as stat(2) gives it (a file
/// rewritten gets another size, modification or change time) and the offset of data(). What lets a backend know the
/// same weight across runs without reading it (the CPU's packed-weight cache).
struct file_origin {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t modified_ns = 0;
  int64_t changed_ns = 0;
  uint64_t offset = 0;  ///< of data() in the file
  std::string
      path;  ///< the file's path when it was opened (absolute), to tell later whether it still holds these bytes
  /// A strided slice of the file (a tensor's columns, as a row-parallel TP rank holds them): the bytes from the start
  /// of one of its rows in the file to the next; its rows are the buffer's rows, back to back. 0: one contiguous run.
  uint64_t row_stride = 0;
  /// What the loader made of those bytes before handing them on, when not the bytes themselves (a weight quantized at
  /// load: which rounding, and its version); 0: the bytes as stored. Part of what names them.
  uint64_t transform = 0;
  bool operator==(const file_origin&) const = default;
};

/// The identity of the file at `path` whose stat(2) is `st`, at offset 0.
file_origin file_origin_of(const struct ::stat& st, std::string path);

/// Memory a backend owns on its device. data() is an address on that device (a host address for the CPU).
class buffer {
 public:
  virtual ~buffer() = default;
  /// The file these bytes are a part of, unchanged, where they are one (a weight used in place in its checkpoint's
  /// mapping); none for memory of its own.
  virtual std::optional<file_origin> origin() const { return std::nullopt; }
  /// Start of the allocation, on the buffer's device.
  virtual void* data() = 0;
  /// Size in bytes.
  virtual size_t size() const = 0;
  /// The device holding the memory.
  virtual device where() const = 0;
};

/// A 64-byte-aligned host allocation (the CPU backend's buffer), or host memory adopted from a loader.
class host_buffer final : public buffer {
 public:
  /// Uninitialised memory: pages are committed only when first written (the KV cache relies on it).
  static std::shared_ptr<host_buffer> allocate(size_t bytes);
  /// As allocate, 2 MiB-aligned and advised to the kernel as transparent huge pages (weights streamed every step:
  /// fewer TLB misses). Falls back to small pages where the kernel has no THP.
  static std::shared_ptr<host_buffer> allocate_huge(size_t bytes);
  /// Takes ownership of `data` (`bytes` long), released with std::free.
  static std::shared_ptr<host_buffer> adopt(void* data, size_t bytes);

  host_buffer(void* data, size_t bytes) : data_(data), size_(bytes) {}
  ~host_buffer() override;
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }
  device where() const override { return device{}; }

 private:
  void* data_;
  size_t size_;
};

/// Up to four dimensions, outermost first (row-major).
struct tensor_shape {
  static constexpr int max_dims = 4;
  std::array<int64_t, max_dims> dims{};
  int n_dims = 0;

  tensor_shape() = default;
  tensor_shape(std::initializer_list<int64_t> d);
  /// Product of the dimensions (1 for a 0-d shape).
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  /// "[2, 3]".
  std::string to_string() const;
  friend bool operator==(const tensor_shape& a, const tensor_shape& b) {
    if (a.n_dims != b.n_dims)
      return false;
    for (int i = 0; i < a.n_dims; ++i)
      if (a.dims[static_cast<size_t>(i)] != b.dims[static_cast<size_t>(i)])
        return false;
    return true;
  }
};

/// How a tensor's elements lie in its buffer. Every op takes row_major tensors; a packed layout is made by a backend
/// for its own matmul kernels (backend::import_linear_weight) and read by nothing else.
enum class tensor_layout : uint8_t {
  row_major,
  /// The CPU backend's bf16 Linear weight [n_out, n_in]: panels of 32 output rows (the last zero-padded), each
  /// [n_in rounded up to 32, zero-padded, / 2][32] pairs of bf16: the operand order of vdpbf16ps.
  cpu_bf16_panels,
  /// The same panels in 12 bits a bf16 value, losslessly (kernels/cpu/compact_panels.hpp): each panel's low bytes
  /// as they are and its high bytes as 4-bit codes into the panel's table, with the few others listed apart.
  cpu_bf16_compact_panels,
  /// The CPU backend's quantized Linear weights (backend::import_quantized_linear): the buffer is a
  /// cpu::quantized_panels holding 8-bit or 4-bit codes with their group scales and zero points in its kernels' order.
  cpu_q8,
  cpu_q4,
  /// The CUDA backend's quantized Linear weights (weight-only, groups a multiple of 16 inputs): the buffer is a
  /// cuda::quantized_weight holding 8-bit or 4-bit codes in the A-fragment order of the tensor cores' mma.m16n8k16,
  /// per tile of 16 rows, with the tiles' f32 group scales and u8 zero points (kernels/cuda/quantized_gemv_math.hpp).
  cuda_q8,
  cuda_q4,
};

/// A handle to a dense, row-major tensor in a buffer: `type`, `shape`, and where in the buffer it starts. A default
/// tensor is empty (no buffer), which ops read as "absent" (an optional bias, say).
struct tensor {
  dtype type = dtype::f32;
  tensor_shape shape;
  std::shared_ptr<buffer> buf;
  size_t offset = 0;  ///< bytes from buf->data()
  tensor_layout layout = tensor_layout::row_major;

  bool empty() const { return buf == nullptr; }
  explicit operator bool() const { return !empty(); }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(type); }
  int64_t dim(int i) const { return shape[i]; }
  /// Size of the outermost dimension (1 for a 0-d tensor).
  int64_t rows() const { return shape.n_dims == 0 ? 1 : shape[0]; }
  /// Elements per outermost index: numel() / rows().
  int64_t row_size() const;
  /// The device the data is on (the CPU for an empty tensor).
  device where() const { return buf ? buf->where() : device{}; }
  /// Address of the first element, on the tensor's device.
  void* data() const { return static_cast<std::byte*>(buf->data()) + offset; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data());
  }

  /// Rows [begin, begin + n) of the outermost dimension, sharing the buffer (row-major tensors only).
  tensor slice_rows(int64_t begin, int64_t n) const;
  /// The same elements under another shape of equal numel (row-major tensors only).
  tensor reshape(tensor_shape s) const;
  /// "bf16[4096, 2048] on cpu".
  std::string describe() const;
};

/// A tensor over a fresh host_buffer (uninitialised).
tensor make_host_tensor(dtype type, tensor_shape shape);
/// make_host_tensor over host_buffer::allocate_huge.
tensor make_huge_host_tensor(dtype type, tensor_shape shape);

}  // namespace actorllm
