// The order a thread reads its share of a batch-1 decode matmul in, so that its memory streams run unbroken from one
// grain to the next. The streamed decode kernel (matmul_bf16.cpp) reads each thread's units (panels of 32 outputs) as
// several streams side by side. Cut into guided grains shared by all threads, every grain started its streams afresh
// at a new place: on the 2-vCPU Zen 4 VM in its fast bandwidth state a stream that runs 128 KiB to 1 MiB before it
// jumps reads 4-13% less than one that runs on (/tmp microbenchmarks, 2026-12-01). Here each pool thread has a home
// (thread_pool::home_split) whose units form `streams` contiguous runs; the home's items walk them one unit of each
// run at a time, so consecutive grains of a home continue the same runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/cpu/read_ahead.hpp"

namespace actorllm::cpu {

class home_streams {
 public:
  /// `n_units` units over `n_homes` homes (thread_pool::home_items_begin), each home's units in min(streams, its
  /// units) runs of near-equal length. Throws std::invalid_argument unless n_units >= 0, n_homes >= 1, streams >= 1.
  home_streams(int64_t n_units, int n_homes, int streams);
  /// The same, made once per calling thread and shape and kept: a decode step makes the same few calls every step.
  static std::shared_ptr<const home_streams> shared(int64_t n_units, int n_homes, int streams);

  /// The unit item `item` reads (a bijection on [0, n_units)).
  int64_t unit_of(int64_t item) const { return units_[static_cast<size_t>(item)]; }
  /// Whether `item` starts a step: the units of one step (one of each run) are read side by side.
  bool starts_step(int64_t item) const { return step_start_[static_cast<size_t>(item)] != 0; }
  /// Home h's runs: units [begin, end) each, in the order the home's steps visit them.
  const std::vector<std::pair<int64_t, int64_t>>& runs(int h) const { return runs_[static_cast<size_t>(h)]; }
  int n_homes() const { return static_cast<int>(runs_.size()); }
  int64_t n_units() const { return static_cast<int64_t>(units_.size()); }

 private:
  std::vector<int64_t> units_;
  std::vector<uint8_t> step_start_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> runs_;
};

/// What each home of `homes` reads first, for the call before it to read ahead (read_ahead): per home, the start of
/// each run as a stream, at most read_ahead_plan::max_streams streams and each stream's first
/// read_ahead_plan::max_tiles tiles; `tile_at(unit)` is where a tile of `tile_bytes` starts. A home reads ahead at most
/// `budget` bytes in all, spread over its streams, and no stream past its first tiles. The plan's owners are the
/// caller's to set.
read_ahead_plan home_first_reads(const home_streams& homes, size_t tile_bytes, size_t budget,
                                 const std::function<const void*(int64_t unit)>& tile_at);

}  // namespace actorllm::cpu
