// bench/paired_roofline.hpp: segments of decode steps held to the higher probe pass around each, with probe passes of
// known rates.
#include "bench/paired_roofline.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

namespace {

using actorllm::bench::paired_roofline;

// Returns the given rates in turn, counting the calls.
struct scripted_probe {
  std::vector<double> rates;
  size_t calls = 0;
  double operator()() { return rates.at(calls++); }
};

}  // namespace

TEST_CASE("paired roofline: each segment against the higher pass around it, the median over segments") {
  scripted_probe probe{{40e9, 50e9, 30e9, 30e9}};
  // 2 steps a segment, 1e9 bytes a step.
  paired_roofline p{[&] { return probe(); }, 2, 1e9};
  p.start();
  CHECK(probe.calls == 1);
  // Segment 0: 2e9 bytes in 0.05 s = 40 GB/s, passes 40 and 50: 0.8.
  p.after_step(1, 0.02);
  CHECK(probe.calls == 1);  // no pass inside a segment
  p.after_step(2, 0.03);
  CHECK(probe.calls == 2);
  // Segment 1: 2e9 bytes in 0.1 s = 20 GB/s, passes 50 and 30: 0.4.
  p.after_step(3, 0.05);
  p.after_step(4, 0.05);
  // Segment 2: 2e9 bytes in 2/27 s = 27 GB/s, passes 30 and 30: 0.9.
  p.after_step(5, 1.0 / 27);
  p.after_step(6, 1.0 / 27);
  // A step after the last whole segment is not compared and probes nothing.
  p.after_step(7, 1.0);
  CHECK(probe.calls == 4);
  const std::vector<double> f = p.segment_fractions();
  REQUIRE(f.size() == 3);
  CHECK(f[0] == doctest::Approx(0.8));
  CHECK(f[1] == doctest::Approx(0.4));
  CHECK(f[2] == doctest::Approx(0.9));
  CHECK(p.fraction() == doctest::Approx(0.8));
  CHECK(p.passes() == std::vector<double>{40e9, 50e9, 30e9, 30e9});
  // Each whole segment's own rate: 40, 20 and 27 GB/s (the step after them counts in none).
  const std::vector<double>& rates = p.segment_bytes_per_s();
  REQUIRE(rates.size() == 3);
  CHECK(rates[0] == doctest::Approx(40e9));
  CHECK(rates[1] == doctest::Approx(20e9));
  CHECK(rates[2] == doctest::Approx(27e9));
}

TEST_CASE("paired roofline: a segment during which the state turned fast is held to the faster pass") {
  // The state turned fast during the decode: the segment read 60 GB/s, the passes around it 35 and 62.
  scripted_probe probe{{35e9, 62e9}};
  paired_roofline p{[&] { return probe(); }, 1, 60e9};
  p.start();
  p.after_step(1, 1.0);
  CHECK(p.fraction() == doctest::Approx(60.0 / 62.0));
}

TEST_CASE("paired roofline: no whole segment gives 0, and bad use is refused") {
  scripted_probe probe{{1e9, 1e9}};
  paired_roofline p{[&] { return probe(); }, 4, 1e9};
  CHECK_THROWS_AS(p.after_step(1, 0.1), std::logic_error);  // before start
  p.start();
  p.after_step(1, 0.1);
  CHECK(p.fraction() == 0.0);
  CHECK(p.segment_fractions().empty());
  CHECK_THROWS_AS((paired_roofline{[] { return 1.0; }, 0, 1e9}), std::invalid_argument);
}
