// Each home's units as runs walked side by side (see home_streams.hpp).
#include "kernels/cpu/home_streams.hpp"

#include "util/thread_pool.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

namespace actorllm::cpu {

home_streams::home_streams(int64_t n_units, int n_homes, int streams) {
  if (n_units < 0 || n_homes < 1 || streams < 1)
    throw std::invalid_argument("home_streams: needs units >= 0 and at least one home and one stream");
  units_.reserve(static_cast<size_t>(n_units));
  step_start_.reserve(static_cast<size_t>(n_units));
  runs_.resize(static_cast<size_t>(n_homes));
  for (int h = 0; h < n_homes; ++h) {
    const int64_t begin = thread_pool::home_items_begin(n_units, n_homes, h);
    const int64_t m = thread_pool::home_items_begin(n_units, n_homes, h + 1) - begin;
    const int64_t s_count = std::min<int64_t>(streams, m);
    auto& runs = runs_[static_cast<size_t>(h)];
    for (int64_t s = 0; s < s_count; ++s)  // near-equal: lengths differ by at most one
      runs.emplace_back(begin + m * s / s_count, begin + m * (s + 1) / s_count);
    const int64_t longest = s_count == 0 ? 0 : (m + s_count - 1) / s_count;  // the first run's length
    for (int64_t j = 0; j < longest; ++j) {
      bool first = true;
      for (const auto& [b, e] : runs)
        if (b + j < e) {
          units_.push_back(b + j);
          step_start_.push_back(first ? 1 : 0);
          first = false;
        }
    }
  }
}

std::shared_ptr<const home_streams> home_streams::shared(int64_t n_units, int n_homes, int streams) {
  thread_local std::map<std::tuple<int64_t, int, int>, std::shared_ptr<const home_streams>> made;
  constexpr size_t max_kept = 256;  // shapes; past this many the cache starts over
  const auto key = std::make_tuple(n_units, n_homes, streams);
  if (auto it = made.find(key); it != made.end())
    return it->second;
  auto hs = std::make_shared<const home_streams>(n_units, n_homes, streams);
  if (made.size() >= max_kept)
    made.clear();
  made.emplace(key, hs);
  return hs;
}

read_ahead_plan home_first_reads(const home_streams& homes, size_t tile_bytes, size_t budget,
                                 const std::function<const void*(int64_t unit)>& tile_at) {
  read_ahead_plan plan;
  for (int h = 0; h < homes.n_homes(); ++h) {
    read_ahead_plan::thread_heads heads;
    heads.tile_bytes = tile_bytes;
    int64_t longest = 0;
    for (const auto& [b, e] : homes.runs(h)) {
      if (heads.count == read_ahead_plan::max_streams)
        break;
      const auto s = static_cast<size_t>(heads.count++);
      int& n = heads.tiles[s];
      for (n = 0; n < read_ahead_plan::max_tiles && b + n < e; ++n)
        heads.at[s][static_cast<size_t>(n)] = static_cast<const char*>(tile_at(b + n));
      longest = std::max<int64_t>(longest, n);
    }
    heads.bytes = heads.count == 0
                      ? 0
                      : std::min(static_cast<size_t>(longest) * tile_bytes, budget / static_cast<size_t>(heads.count));
    plan.threads.push_back(heads);
  }
  return plan;
}

}  // namespace actorllm::cpu
