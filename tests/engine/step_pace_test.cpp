// step_pace: the step timeout stretched by the pace of recent steps, so a long or slowed step is not taken for a
// hung shard, while a step that takes far longer than its tokens should still is.
#include "engine/step_pace.hpp"

#include <doctest/doctest.h>

using actorllm::engine::step_pace;
using namespace std::chrono_literals;

TEST_CASE("step pace: before any result, and for short steps, the limit is the configured timeout") {
  step_pace p{300s};
  CHECK(p.limit(1000) == 300s);
  p.observe(1, 80ms);  // a quiet decode step
  CHECK(p.seconds_per_token() == doctest::Approx(0.08));
  CHECK(p.limit(1) == 300s);
  CHECK(p.limit(100) == 300s);  // 8 x 8 s
}

TEST_CASE("step pace: a long prefill on a slowed machine gets its time, a hang beyond it does not") {
  step_pace p{300s};
  // The cores shared with other work: decode steps at 1.5 s per token, then a 1,000-token prefill.
  for (int i = 0; i < 5; ++i)
    p.observe(1, 1500ms);
  const auto limit = p.limit(1000);
  CHECK(limit == std::chrono::milliseconds{12'000'000});  // 8 x 1,000 x 1.5 s
  CHECK(limit > 300s);
  // A pace of 1.5 s/token still bounds a 1-token step at the configured 300 s: a hang is named after 300 s.
  CHECK(p.limit(1) == 300s);
}

TEST_CASE("step pace: the pace forgets slowly once steps are fast again, and zero means no limit") {
  step_pace p{1s};
  p.observe(10, 10s);  // 1 s per token
  for (int i = 0; i < 30; ++i)
    p.observe(10, 10ms);  // 1 ms per token
  CHECK(p.seconds_per_token() < 0.05);
  CHECK(p.seconds_per_token() > 0.001);
  CHECK(step_pace{0ms}.limit(1'000'000) == 0ms);
  step_pace q{1s};
  q.observe(0, 5s);  // no tokens: nothing to learn
  q.observe(3, -1s);
  CHECK(q.seconds_per_token() == 0.0);
  q.observe(1, 1000h);  // an absurd step cannot overflow the limit
  CHECK(q.limit(1'000'000'000) == std::chrono::milliseconds{86'400'000});
}
