// Helpers for the Gloo data-plane tests: run the ranks of one group as threads over a memory_store.
#pragma once

#include "comm/gloo_group.hpp"
#include "comm/memory_store.hpp"
#include "rank_threads.hpp"

#include <memory>
#include <string>

namespace actorllm::test {

/// Runs body(group) on `n` threads, each joined as one rank of group `name` over `store`; rethrows the first
/// exception a rank threw, after every thread has finished.
template <class F>
void run_gloo_ranks(comm::rendezvous_store& store, const std::string& name, int n, F&& body,
                    comm::gloo_group_options options = {}) {
  run_rank_threads(n, [&](int r) { body(std::make_shared<comm::gloo_group>(store, name, r, n, options)); });
}

}  // namespace actorllm::test
