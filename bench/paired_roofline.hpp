// Batch-1 decode against the probe read beside it. On a VM whose memory bandwidth changes state within seconds (the
// 2-vCPU Zen 5 VM: 35 and 60-70 GB/s), a round's probe and its decode, seconds apart, can see different machines: a
// round read 65.5% of the roofline from a 50.8 GB/s probe while every probe pass during its decode read 34-36 GB/s,
// and rounds whose state turned fast during the decode read over 100%. So the timed steps are cut into segments, and
// a probe pass (the round's best read pattern; bench_cpu_decode also reads a reference pattern and keeps the higher)
// runs before the first and after each (its time is not the decode's); a segment is compared with the higher of the two
// passes around it, and the round's figure is the median over its segments. The higher pass, not their mean: a segment
// during which the state changed is held to the faster state.
#pragma once

#include "bench/bench_support.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace actorllm::bench {

class paired_roofline {
 public:
  /// `probe_pass` reads the buffer (the round's best pattern, or the higher of it and another) and returns bytes/s;
  /// every `segment_steps` decode steps of `bytes_per_step` weight bytes each form a segment.
  paired_roofline(std::function<double()> probe_pass, int64_t segment_steps, double bytes_per_step)
      : probe_pass_(std::move(probe_pass)), segment_steps_(segment_steps), bytes_per_step_(bytes_per_step) {
    if (segment_steps_ < 1)
      throw std::invalid_argument("paired_roofline: segment_steps must be at least 1");
  }

  /// Before the first timed step.
  void start() { passes_.push_back(probe_pass_()); }

  /// After each timed step (numbered from 1), with its seconds; closes a segment every `segment_steps` steps. Steps
  /// after the last whole segment are not compared.
  void after_step(int64_t step, double secs) {
    if (passes_.empty())
      throw std::logic_error("paired_roofline: after_step before start");
    open_secs_ += secs;
    if (step % segment_steps_ != 0)
      return;
    segment_bytes_per_s_.push_back(static_cast<double>(segment_steps_) * bytes_per_step_ / open_secs_);
    open_secs_ = 0;
    passes_.push_back(probe_pass_());
  }

  /// Each whole segment's read rate over the higher of the probe passes before and after it.
  std::vector<double> segment_fractions() const {
    std::vector<double> out;
    for (size_t i = 0; i < segment_bytes_per_s_.size(); ++i)
      out.push_back(segment_bytes_per_s_[i] / std::max(passes_[i], passes_[i + 1]));
    return out;
  }
  /// The median of segment_fractions() (0 with no whole segment).
  double fraction() const { return median(segment_fractions()); }
  /// The probe passes, in order (one more than the segments).
  const std::vector<double>& passes() const { return passes_; }
  /// Each whole segment's weight bytes read per second, in order.
  const std::vector<double>& segment_bytes_per_s() const { return segment_bytes_per_s_; }

 private:
  std::function<double()> probe_pass_;
  int64_t segment_steps_;
  double bytes_per_step_;
  double open_secs_ = 0;
  std::vector<double> passes_, segment_bytes_per_s_;
};

}  // namespace actorllm::bench
