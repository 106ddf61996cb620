// Helpers for the Gloo data-plane tests: run the ranks of one group as threads over a memory_store.
#pragma once

#include "comm/gloo_group.hpp"
#include "comm/memory_store.hpp"

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace actorllm::test {

/// Runs body(group) on `n` threads, each joined as one rank of group `name` over `store`; rethrows the first
/// exception a rank threw, after every thread has finished.
template <class F>
void run_gloo_ranks(comm::rendezvous_store& store, const std::string& name, int n, F&& body,
                    comm::gloo_group_options options = {}) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto group = std::make_shared<comm::gloo_group>(store, name, r, n, options);
        body(group);
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
