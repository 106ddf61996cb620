// Slice layouts, chunking and a small fork-join loop for the loaders.
#include "model/slice_plan.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace actorllm::model {

slice_layout make_slice_layout(const std::vector<int64_t>& full_shape, const tensor_slice& slice) {
  slice_layout l;
  if (full_shape.empty())  // a 0-d tensor is one element
    return l;
  const auto dim = static_cast<size_t>(slice.dim);
  for (size_t i = 0; i < dim; ++i)
    l.outer *= full_shape[i];
  l.full_dim = full_shape[dim];
  for (size_t i = dim + 1; i < full_shape.size(); ++i)
    l.inner *= full_shape[i];
  l.begin = slice.begin;
  l.end = slice.end;
  return l;
}

void append_chunks(size_t tensor, const slice_layout& layout, int64_t target_elements,
                   std::vector<slice_chunk>& chunks) {
  const int64_t run = layout.run();
  if (run == 0 || layout.outer == 0)
    return;
  if (run >= target_elements) {  // long runs: split each run
    for (int64_t o = 0; o < layout.outer; ++o)
      for (int64_t j = 0; j < run; j += target_elements)
        chunks.push_back({tensor, o, o + 1, j, std::min(j + target_elements, run)});
    return;
  }
  const int64_t runs_per_chunk = std::max<int64_t>(1, target_elements / run);  // short runs: group them
  for (int64_t o = 0; o < layout.outer; o += runs_per_chunk)
    chunks.push_back({tensor, o, std::min(o + runs_per_chunk, layout.outer), 0, run});
}

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  const size_t n_threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error)
          first_error = std::current_exception();
        next = n;  // stop handing out work
      }
    }
  };
  if (n_threads <= 1) {
    worker();
  } else {
    std::vector<std::jthread> threads;
    threads.reserve(n_threads - 1);
    for (size_t t = 1; t < n_threads; ++t)
      threads.emplace_back(worker);
    worker();
  }  // jthreads join here
  if (first_error)
    std::rethrow_exception(first_error);
}

}  // namespace actorllm::model
