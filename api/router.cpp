// The data-parallel router: see router.hpp.
#include "api/router.hpp"

#include <algorithm>

namespace actorllm::detail {

router::router(int32_t n_replicas, options opts)
    : opts_(opts), cached_(static_cast<size_t>(n_replicas)), counts_(static_cast<size_t>(n_replicas), 0) {
  opts_.block_size = std::max(opts_.block_size, 1);
}

std::vector<engine::block_hash> router::block_hashes(std::span<const int32_t> prompt,
                                                     const std::optional<std::string>& cache_salt) const {
  std::vector<engine::block_hash> out;
  if (prompt.empty())
    return out;
  const size_t n_blocks = (prompt.size() - 1) / static_cast<size_t>(opts_.block_size);
  engine::extend_block_hashes(out, prompt, opts_.block_size, n_blocks, engine::first_block_extra_keys(cache_salt));
  return out;
}

size_t router::matched_blocks(int32_t replica, const std::vector<engine::block_hash>& hashes) const {
  const lru_set& set = cached_[static_cast<size_t>(replica)];
  size_t n = 0;
  while (n < hashes.size() && set.where.contains(hashes[n]))
    ++n;
  return n;
}

std::optional<int32_t> router::pick(std::span<const int32_t> prompt, std::span<const int64_t> work,
                                    const std::vector<bool>& serving,
                                    const std::optional<std::string>& cache_salt) const {
  const auto n = static_cast<int32_t>(counts_.size());
  std::optional<int32_t> least;
  auto better = [&](int32_t a, int32_t b) {  // a less loaded than b
    const auto ua = static_cast<size_t>(a);
    const auto ub = static_cast<size_t>(b);
    if (work[ua] != work[ub])
      return work[ua] < work[ub];
    return counts_[ua] < counts_[ub];
  };
  for (int32_t r = 0; r < n; ++r) {
    if (static_cast<size_t>(r) >= serving.size() || !serving[static_cast<size_t>(r)])
      continue;
    if (!least || better(r, *least))
      least = r;
  }
  if (!least || !opts_.prefix_affinity)
    return least;
  const std::vector<engine::block_hash> hashes = block_hashes(prompt, cache_salt);
  if (hashes.empty())
    return least;
  std::optional<int32_t> affine;
  size_t best = 0;
  for (int32_t r = 0; r < n; ++r) {
    if (!serving[static_cast<size_t>(r)])
      continue;
    const size_t m = matched_blocks(r, hashes);
    if (m > best || (m == best && m > 0 && affine && better(r, *affine))) {
      best = m;
      affine = r;
    }
  }
  if (!affine || best == 0)
    return least;
  const int64_t excess = work[static_cast<size_t>(*affine)] - work[static_cast<size_t>(*least)];
  return excess <= opts_.affinity_slack ? affine : least;
}

void router::routed(std::span<const int32_t> prompt, int32_t replica, const std::optional<std::string>& cache_salt) {
  if (replica < 0 || static_cast<size_t>(replica) >= counts_.size())
    return;
  ++counts_[static_cast<size_t>(replica)];
  if (!opts_.prefix_affinity)
    return;
  lru_set& set = cached_[static_cast<size_t>(replica)];
  for (const engine::block_hash& h : block_hashes(prompt, cache_salt)) {
    if (auto it = set.where.find(h); it != set.where.end()) {
      set.order.splice(set.order.begin(), set.order, it->second);
      continue;
    }
    set.order.push_front(h);
    set.where[h] = set.order.begin();
    if (set.order.size() > opts_.remembered_blocks) {
      set.where.erase(set.order.back());
      set.order.pop_back();
    }
  }
}

void router::forget(int32_t replica) {
  if (replica < 0 || static_cast<size_t>(replica) >= cached_.size())
    return;
  cached_[static_cast<size_t>(replica)] = lru_set{};
}

}  // namespace actorllm::detail
