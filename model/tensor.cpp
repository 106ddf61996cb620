// Aligned host tensor storage.
#include "model/tensor.hpp"

#include <new>
#include <utility>

namespace actorllm::model {

namespace {
// One cache line; also what AVX-512 loads want.
constexpr size_t tensor_alignment = 64;
}  // namespace

host_tensor::host_tensor(dtype t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
  nbytes_ = static_cast<size_t>(numel()) * dtype_size(type);
  // aligned_alloc wants a multiple of the alignment, and a non-zero size so that data() is never null.
  const size_t rounded = (nbytes_ + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  void* p = std::aligned_alloc(tensor_alignment, rounded == 0 ? tensor_alignment : rounded);
  if (p == nullptr)
    throw std::bad_alloc();
  storage_.reset(static_cast<std::byte*>(p));
}

int64_t host_tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

}  // namespace actorllm::model
