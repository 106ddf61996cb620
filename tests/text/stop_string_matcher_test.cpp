// Stop strings: held-back suffixes, matches across deltas, include_stop_str_in_output.
#include "text/stop_string_matcher.hpp"

#include <doctest/doctest.h>

using actorllm::text::stop_string_matcher;

TEST_CASE("stop strings: text is released unless it could start a stop string") {
  stop_string_matcher m{{"STOP"}};
  auto r = m.push("Hello S");
  CHECK(r.text == "Hello ");
  CHECK_FALSE(r.stop_index);
  r = m.push("T");
  CHECK(r.text.empty());
  r = m.push("x and");
  CHECK(r.text == "STx and");
  CHECK_FALSE(m.stopped());
  r = m.push(" more ST");
  CHECK(r.text == " more ");
  CHECK(m.finish() == "ST");
}

TEST_CASE("stop strings: a match across deltas ends the stream without the stop text") {
  stop_string_matcher m{{"</answer>", "\n\n"}};
  CHECK(m.push("42 </an").text == "42 ");
  auto r = m.push("swer> ignored");
  CHECK(r.text.empty());
  REQUIRE(r.stop_index);
  CHECK(*r.stop_index == 0);
  CHECK(m.stopped());
  CHECK(m.push("more").text.empty());
  CHECK(m.finish().empty());
}

TEST_CASE("stop strings: the earliest occurrence wins, and include_stop_str_in_output keeps it") {
  {
    stop_string_matcher m{{"b", "a"}};
    auto r = m.push("xxab");
    CHECK(r.text == "xx");
    REQUIRE(r.stop_index);
    CHECK(*r.stop_index == 1);
  }
  {
    stop_string_matcher m{{"STOP"}, true};
    CHECK(m.push("Hello ST").text == "Hello ST");  // nothing held back: the stop text would be emitted anyway
    auto r = m.push("OP and more");
    CHECK(r.text == "OP");
    CHECK(r.stop_index == 0u);
  }
  {
    stop_string_matcher m{{"。"}};
    auto r = m.push("你好。再见");
    CHECK(r.text == "你好");
    CHECK(r.stop_index == 0u);
  }
  {
    stop_string_matcher none{{}};
    CHECK(none.push("anything").text == "anything");
    CHECK(none.finish().empty());
  }
}
