// One rank's checks of tp_collective::all_to_all_rows, the same on every transport: rounds of uneven row counts
// (zeros, a rank that sends nothing, a round where nobody sends) from a seeded generator that every rank can replay,
// so each knows what every other sent it.
#pragma once

#include "comm/collective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace actorllm::test {

/// The rows `src` sends to each of `n` ranks in `round`: 0..6 each, except that in round 0 the last rank sends
/// nothing, in round 2 nobody does, and in round 3 only rank 0 does.
inline std::vector<int64_t> all_to_all_counts(int src, int n, int round) {
  std::mt19937 rng{static_cast<uint32_t>(round * 7919 + src)};
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (auto& c : counts)
    c = static_cast<int64_t>(rng() % 7);
  const bool silent = (round == 0 && src == n - 1) || round == 2 || (round == 3 && src != 0);
  if (silent)
    std::fill(counts.begin(), counts.end(), 0);
  return counts;
}

/// Element j of row i that `src` sends `dst`: small integers, exact in floats.
inline float all_to_all_value(int src, int dst, int64_t i, int64_t j) {
  return static_cast<float>(src * 1000 + dst * 100 + i * 10 + j);
}

/// Runs the rounds on `c` (every rank of its group calls this at once); returns "" or what went wrong.
inline std::string check_all_to_all_rounds(tp_collective& c) {
  const int n = c.size();
  const int me = c.rank();
  constexpr int64_t width = 5;
  constexpr uint64_t row_bytes = width * sizeof(float);
  const auto peers = static_cast<uint64_t>(n - 1);
  for (int round = 0; round < 4; ++round) {
    const std::vector<int64_t> counts = all_to_all_counts(me, n, round);
    std::vector<float> send;
    for (int d = 0; d < n; ++d)
      for (int64_t i = 0; i < counts[static_cast<size_t>(d)]; ++i)
        for (int64_t j = 0; j < width; ++j)
          send.push_back(all_to_all_value(me, d, i, j));
    // What this rank must receive, and the largest any rank sends (the all-gather form pads to it).
    std::vector<int64_t> expected_from(static_cast<size_t>(n));
    std::vector<float> expected;
    int64_t max_total = 0;
    for (int src = 0; src < n; ++src) {
      const std::vector<int64_t> theirs = all_to_all_counts(src, n, round);
      int64_t total = 0;
      for (const int64_t rows : theirs)
        total += rows;
      max_total = std::max(max_total, total);
      expected_from[static_cast<size_t>(src)] = theirs[static_cast<size_t>(me)];
      for (int64_t i = 0; i < theirs[static_cast<size_t>(me)]; ++i)
        for (int64_t j = 0; j < width; ++j)
          expected.push_back(all_to_all_value(src, me, i, j));
    }
    int64_t rows_out = 0, rows_in = 0;
    for (int p = 0; p < n; ++p)
      if (p != me) {
        rows_out += counts[static_cast<size_t>(p)];
        rows_in += expected_from[static_cast<size_t>(p)];
      }

    const exchange_stats before = c.exchange_statistics();
    std::vector<float> recv{-1.0f};  // stale contents must go
    const std::vector<int64_t> from = c.all_to_all_rows(send.data(), counts, width, recv);
    if (from != expected_from)
      return fmt::format("round {}: the counts from each source are wrong", round);
    if (recv != expected)
      return fmt::format("round {}: the rows are not the ones sent, in source order", round);
    const exchange_stats after = c.exchange_statistics();
    if (after.exchanges != before.exchanges + 1 ||
        after.rows_sent - before.rows_sent != static_cast<uint64_t>(rows_out) ||
        after.rows_received - before.rows_received != static_cast<uint64_t>(rows_in) ||
        after.bytes_sent - before.bytes_sent != static_cast<uint64_t>(rows_out) * row_bytes + peers * 8 ||
        after.bytes_received - before.bytes_received != static_cast<uint64_t>(rows_in) * row_bytes + peers * 8)
      return fmt::format("round {}: the all-to-all counted {} bytes out, {} in; the formula says {} and {}", round,
                         after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
                         static_cast<uint64_t>(rows_out) * row_bytes + peers * 8,
                         static_cast<uint64_t>(rows_in) * row_bytes + peers * 8);

    // Back again: what came in returns to its source in the order it was sent (expert parallelism's combine).
    std::vector<float> back;
    const std::vector<int64_t> returned = c.all_to_all_rows(recv.data(), from, width, back);
    if (returned != counts || back != send)
      return fmt::format("round {}: the rows did not come back as sent", round);

    // The all-gather form delivers the same, and moves every rank's padded buffer to every peer.
    const exchange_stats before_gather = c.exchange_statistics();
    std::vector<float> gathered;
    const std::vector<int64_t> gathered_from = c.all_to_all_rows_via_all_gather(send.data(), counts, width, gathered);
    if (gathered_from != from || gathered != recv)
      return fmt::format("round {}: the all-gather form delivered something else", round);
    const exchange_stats after_gather = c.exchange_statistics();
    const uint64_t carried = peers * (static_cast<uint64_t>(n) + static_cast<uint64_t>(max_total * width)) * 4;
    if (after_gather.bytes_sent - before_gather.bytes_sent != carried ||
        after_gather.bytes_received - before_gather.bytes_received != carried ||
        after_gather.rows_sent - before_gather.rows_sent != static_cast<uint64_t>(rows_out))
      return fmt::format("round {}: the all-gather form counted {} bytes; the formula says {}", round,
                         after_gather.bytes_sent - before_gather.bytes_sent, carried);
  }
  return "";
}

}  // namespace actorllm::test
