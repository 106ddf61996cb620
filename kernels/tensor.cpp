// Tensor handles and host buffers.
#include "kernels/tensor.hpp"

#include "util/check.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <new>
#include <utility>

#include <sys/mman.h>
#include <sys/stat.h>

namespace actorllm {

file_origin file_origin_of(const struct ::stat& st, std::string path) {
  return {static_cast<uint64_t>(st.st_dev),
          static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_size),
          int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
          int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec,
          0,
          std::move(path)};
}

std::shared_ptr<host_buffer> host_buffer::allocate(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; malloc'd pages stay uncommitted until written.
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr)
    throw std::bad_alloc();
  return std::make_shared<host_buffer>(p, bytes);
}

std::shared_ptr<host_buffer> host_buffer::allocate_huge(size_t bytes) {
  constexpr size_t huge = size_t{2} << 20;
  const size_t rounded = (bytes + huge - 1) / huge * huge;
  void* p = std::aligned_alloc(huge, rounded == 0 ? huge : rounded);
  if (p == nullptr)
    throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  madvise(p, rounded == 0 ? huge : rounded, MADV_HUGEPAGE);  // advice only: failure leaves small pages
#endif
  return std::make_shared<host_buffer>(p, bytes);
}

std::shared_ptr<host_buffer> host_buffer::adopt(void* data, size_t bytes) {
  return std::make_shared<host_buffer>(data, bytes);
}

host_buffer::~host_buffer() { std::free(data_); }

tensor_shape::tensor_shape(std::initializer_list<int64_t> d) {
  ACTORLLM_CHECK(d.size() <= static_cast<size_t>(max_dims), "tensor_shape: more than 4 dimensions");
  for (int64_t v : d)
    dims[static_cast<size_t>(n_dims++)] = v;
}

int64_t tensor_shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_dims; ++i)
    n *= dims[static_cast<size_t>(i)];
  return n;
}

std::string tensor_shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i)
    s += fmt::format("{}{}", i ? ", " : "", dims[static_cast<size_t>(i)]);
  return s + "]";
}

int64_t tensor::row_size() const {
  const int64_t r = rows();
  return r == 0 ? 0 : numel() / r;
}

tensor tensor::slice_rows(int64_t begin, int64_t n) const {
  ACTORLLM_CHECK(layout == tensor_layout::row_major, "tensor: a packed weight has no row slices");
  ACTORLLM_CHECK(shape.n_dims >= 1 && begin >= 0 && n >= 0 && begin + n <= shape[0], "tensor: row slice out of range");
  tensor t = *this;
  t.shape.dims[0] = n;
  t.offset = offset + static_cast<size_t>(begin * row_size()) * dtype_size(type);
  return t;
}

tensor tensor::reshape(tensor_shape s) const {
  ACTORLLM_CHECK(s.numel() == numel(), "tensor: reshape changes the number of elements");
  ACTORLLM_CHECK(layout == tensor_layout::row_major, "tensor: a packed weight cannot be reshaped");
  tensor t = *this;
  t.shape = s;
  return t;
}

std::string tensor::describe() const {
  return fmt::format("{}{}{} on {}", dtype_name(type), shape.to_string(),
                     layout == tensor_layout::row_major ? "" : " (packed)", where().to_string());
}

namespace {

// A tensor of type and shape over a buffer of its size from `allocate` (host_buffer::allocate or allocate_huge).
tensor host_tensor(dtype type, tensor_shape shape, std::shared_ptr<host_buffer> (*allocate)(size_t)) {
  tensor t;
  t.type = type;
  t.shape = shape;
  t.buf = allocate(t.nbytes());
  return t;
}

}  // namespace

tensor make_host_tensor(dtype type, tensor_shape shape) { return host_tensor(type, shape, &host_buffer::allocate); }

tensor make_huge_host_tensor(dtype type, tensor_shape shape) {
  return host_tensor(type, shape, &host_buffer::allocate_huge);
}

}  // namespace actorllm
