// Runs the ranks of one group as threads of this process, for the collective tests.
#pragma once

#include <exception>
#include <thread>
#include <vector>

namespace actorllm::test {

/// Runs body(rank) for rank 0..n-1, each on its own thread; rethrows the first exception a rank threw, after every
/// thread has finished (a rank that fails early must not leave the others running against a torn-down group).
template <class F>
void run_rank_threads(int n, F&& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (e)
      std::rethrow_exception(e);
}

}  // namespace actorllm::test
