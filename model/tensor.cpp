// Aligned host tensor storage.
#include "model/tensor.hpp"

#include "util/check.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <utility>

namespace actorllm::model {

namespace {
// One cache line; also what AVX-512 loads want.
constexpr size_t tensor_alignment = 64;
// Weights are gigabytes written once and then streamed through every step: on 2 MB pages the first touch takes
// 512x fewer page faults (the load's main cost on a VM) and the GEMMs fewer TLB misses.
constexpr size_t huge_page = size_t{2} << 20;
}  // namespace

host_tensor::host_tensor(dtype t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
  nbytes_ = static_cast<size_t>(numel()) * dtype_size(type);
  const size_t alignment = nbytes_ >= huge_page ? huge_page : tensor_alignment;
  // aligned_alloc wants a multiple of the alignment, and a non-zero size so that data() is never null.
  const size_t rounded = std::max(alignment, (nbytes_ + alignment - 1) / alignment * alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    throw std::bad_alloc();
  if (alignment == huge_page)
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without transparent huge pages it changes nothing
  storage_.reset(static_cast<std::byte*>(p));
}

tensor host_tensor::into_tensor() && {
  tensor t;
  t.type = type;
  ACTORLLM_CHECK(shape.size() <= static_cast<size_t>(tensor_shape::max_dims), "host_tensor: more than 4 dimensions");
  for (int64_t d : shape)
    t.shape.dims[static_cast<size_t>(t.shape.n_dims++)] = d;
  t.buf = host_buffer::adopt(storage_.release(), nbytes_);
  nbytes_ = 0;
  shape.clear();
  return t;
}

int64_t host_tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

}  // namespace actorllm::model
