// The device communicator's watchdog decisions, without CUDA: operations retire in order, a stalled one times out
// counting from when it became the oldest, an asynchronous error or a request from another party aborts at once,
// and an abort is final.
#include "comm/collective_watchdog.hpp"

#include <doctest/doctest.h>

#include <string>

using actorllm::collective_watchdog;
using actorllm::watchdog_action;
using namespace std::chrono_literals;

namespace {
const collective_watchdog::clock::time_point t0{};
}

TEST_CASE("watchdog: operations retire oldest first and nothing pending means waiting") {
  collective_watchdog w{1000ms};
  CHECK(w.poll(t0, true, "") == watchdog_action::wait);  // nothing queued: "done" means nothing
  w.started("ncclAllReduce", t0);
  w.started("ncclAllGather", t0 + 1ms);
  CHECK(w.pending() == 2);
  CHECK(w.poll(t0 + 2ms, false, "") == watchdog_action::wait);
  CHECK(w.poll(t0 + 3ms, true, "") == watchdog_action::done);
  CHECK(w.pending() == 1);
  CHECK(w.oldest() == "ncclAllGather");
  CHECK(w.poll(t0 + 4ms, true, "") == watchdog_action::done);
  CHECK(w.pending() == 0);
  CHECK(w.poll(t0 + 5ms, false, "") == watchdog_action::wait);
  CHECK_FALSE(w.aborted());
}

TEST_CASE("watchdog: an operation that outlives the timeout aborts, naming it") {
  collective_watchdog w{100ms};
  w.started("ncclAllReduce", t0);
  CHECK(w.poll(t0 + 100ms, false, "") == watchdog_action::wait);  // exactly the timeout is still in time
  CHECK(w.poll(t0 + 101ms, false, "") == watchdog_action::abort);
  CHECK(w.aborted());
  CHECK(w.reason().find("ncclAllReduce did not complete within 100 ms") != std::string::npos);
  // Final: later polls neither abort again nor retire anything.
  CHECK(w.poll(t0 + 200ms, true, "") == watchdog_action::wait);
  CHECK(w.pending() == 1);
}

TEST_CASE("watchdog: the timeout of a queued operation starts when it becomes the oldest") {
  collective_watchdog w{100ms};
  w.started("first", t0);
  w.started("second", t0);  // queued behind a long one on the same stream
  CHECK(w.poll(t0 + 90ms, true, "") == watchdog_action::done);
  // second has been queued 180 ms but oldest for only 90 ms: still in time.
  CHECK(w.poll(t0 + 180ms, false, "") == watchdog_action::wait);
  CHECK(w.poll(t0 + 191ms, false, "") == watchdog_action::abort);
  CHECK(w.reason().find("second") != std::string::npos);
}

TEST_CASE("watchdog: an asynchronous error aborts at once, before completion is looked at") {
  collective_watchdog w{10'000ms};
  w.started("ncclSend", t0);
  CHECK(w.poll(t0 + 1ms, true, "remote process exited or there was a network error") == watchdog_action::abort);
  CHECK(w.reason().find("during ncclSend") != std::string::npos);
  CHECK(w.reason().find("remote process exited") != std::string::npos);
}

TEST_CASE("watchdog: an abort request wins over everything, with or without pending work, first reason kept") {
  SUBCASE("pending") {
    collective_watchdog w{10'000ms};
    w.started("ncclAllReduce", t0);
    w.request_abort("replica 0 worker 1 is dead");
    w.request_abort("a later echo");
    CHECK(w.poll(t0, true, "some error") == watchdog_action::abort);
    CHECK(w.reason() == "aborted during ncclAllReduce: replica 0 worker 1 is dead");
  }
  SUBCASE("idle") {
    collective_watchdog w{10'000ms};
    w.request_abort("engine gone");
    CHECK(w.poll(t0, false, "") == watchdog_action::abort);
    CHECK(w.reason() == "aborted: engine gone");
    CHECK(w.poll(t0, false, "") == watchdog_action::wait);
  }
}
