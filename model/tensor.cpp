// Aligned host tensor storage.
#include "model/tensor.hpp"

#include "util/check.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
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

namespace {

// A backend buffer over a view's memory: the CPU backend computes from it in place, and the mapping lives as long as
// any tensor handle does. A backend that rewrites a weight (the expert balancer) writes to private copies of the
// file's pages (safetensors' file_mapping).
class borrowed_host_buffer final : public buffer {
 public:
  borrowed_host_buffer(const void* data, size_t bytes, std::shared_ptr<const void> owner,
                       std::optional<file_origin> origin)
      : data_(data), size_(bytes), owner_(std::move(owner)), origin_(origin) {}
  // A weight the backend packed into a layout of its own (the CPU's bf16 panels) is read once and dropped: its pages
  // leave this process's resident set (they stay in the page cache, and come back on a later read). Only whole pages
  // inside it: its first and last may hold a neighbour still in use.
  ~borrowed_host_buffer() override {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(data_) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(data_) + size_) / page * page;
    if (end > begin)
      ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: on failure they just stay
  }
  borrowed_host_buffer(const borrowed_host_buffer&) = delete;
  borrowed_host_buffer& operator=(const borrowed_host_buffer&) = delete;
  void* data() override { return const_cast<void*>(data_); }
  size_t size() const override { return size_; }
  device where() const override { return device{}; }
  std::optional<file_origin> origin() const override { return origin_; }

 private:
  const void* data_;
  size_t size_;
  std::shared_ptr<const void> owner_;
  std::optional<file_origin> origin_;
};

}  // namespace

// A deferred copy's state, shared by the host_tensor and the backend buffer made from it: the copy is made once,
// by whichever asks first.
struct host_tensor::deferred_copy {
  std::function<void(void*)> fill;
  std::shared_ptr<const void> owner;
  size_t nbytes = 0;
  std::once_flag once;
  host_tensor::storage bytes;

  const std::byte* get() {
    std::call_once(once, [this] {
      storage s = host_tensor::allocate(nbytes);
      fill(s.get());
      bytes = std::move(s);
      fill = nullptr;  // what it read is no longer needed
      owner.reset();
      made.store(true, std::memory_order_release);
    });
    return bytes.get();
  }
  std::atomic<bool> made{false};  // readable while another thread makes the copy
};

namespace {

// A backend buffer over a deferred copy: the copy is made when the backend first asks for data().
class deferred_host_buffer final : public buffer {
 public:
  deferred_host_buffer(std::shared_ptr<host_tensor::deferred_copy> copy, file_origin origin)
      : copy_(std::move(copy)), origin_(std::move(origin)) {}
  void* data() override { return const_cast<std::byte*>(copy_->get()); }
  size_t size() const override { return copy_->nbytes; }
  device where() const override { return device{}; }
  std::optional<file_origin> origin() const override { return origin_; }

 private:
  std::shared_ptr<host_tensor::deferred_copy> copy_;
  file_origin origin_;
};

}  // namespace

host_tensor host_tensor::deferred(dtype t, std::vector<int64_t> s, std::function<void(void* dst)> fill,
                                  std::shared_ptr<const void> owner, file_origin origin) {
  ACTORLLM_CHECK(fill != nullptr && owner != nullptr, "host_tensor::deferred: nothing to fill it, or to read from");
  host_tensor h;
  h.type = t;
  h.shape = std::move(s);
  h.nbytes_ = static_cast<size_t>(h.numel()) * dtype_size(t);
  h.deferred_ = std::make_shared<deferred_copy>();
  h.deferred_->fill = std::move(fill);
  h.deferred_->owner = std::move(owner);
  h.deferred_->nbytes = h.nbytes_;
  h.origin_ = std::move(origin);
  return h;
}

const void* host_tensor::data() const {
  if (deferred_ != nullptr)
    return deferred_->get();
  return view_ != nullptr ? view_ : storage_.get();
}

bool host_tensor::is_deferred() const {
  return deferred_ != nullptr && !deferred_->made.load(std::memory_order_acquire);
}

host_tensor host_tensor::view(dtype t, std::vector<int64_t> s, const void* data, std::shared_ptr<const void> owner,
                              std::optional<file_origin> origin) {
  ACTORLLM_CHECK(data != nullptr && owner != nullptr, "host_tensor::view: no memory, or nothing that owns it");
  host_tensor h;
  h.type = t;
  h.shape = std::move(s);
  h.nbytes_ = static_cast<size_t>(h.numel()) * dtype_size(t);
  h.view_ = data;
  h.owner_ = std::move(owner);
  h.origin_ = origin;
  return h;
}

void* host_tensor::data() {
  if (deferred_ != nullptr) {  // made, then owned like any copy (only a tensor moved out of this one shares it)
    deferred_->get();
    storage_ = std::move(deferred_->bytes);
    deferred_.reset();
    origin_.reset();
  }
  if (view_ != nullptr) {
    host_tensor copy(type, shape);
    std::memcpy(copy.storage_.get(), view_, nbytes_);
    storage_ = std::move(copy.storage_);
    view_ = nullptr;
    owner_.reset();
    origin_.reset();
  }
  return storage_.get();
}

host_tensor::storage host_tensor::allocate(size_t bytes) {
  const size_t alignment = bytes >= huge_page ? huge_page : tensor_alignment;
  // aligned_alloc wants a multiple of the alignment, and a non-zero size so that data() is never null.
  const size_t rounded = std::max(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    throw std::bad_alloc();
  if (alignment == huge_page)
    ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without transparent huge pages it changes nothing
  return storage(static_cast<std::byte*>(p));
}

host_tensor::host_tensor(dtype t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
  nbytes_ = static_cast<size_t>(numel()) * dtype_size(type);
  storage_ = allocate(nbytes_);
}

tensor host_tensor::into_tensor() && {
  tensor t;
  t.type = type;
  ACTORLLM_CHECK(shape.size() <= static_cast<size_t>(tensor_shape::max_dims), "host_tensor: more than 4 dimensions");
  for (int64_t d : shape)
    t.shape.dims[static_cast<size_t>(t.shape.n_dims++)] = d;
  if (deferred_ != nullptr)
    t.buf = std::make_shared<deferred_host_buffer>(std::move(deferred_), std::move(*origin_));
  else if (view_ != nullptr)
    t.buf = std::make_shared<borrowed_host_buffer>(view_, nbytes_, std::move(owner_), origin_);
  else
    t.buf = host_buffer::adopt(storage_.release(), nbytes_);
  view_ = nullptr;
  owner_.reset();
  origin_.reset();
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
