// The fanned-out engine calls behind LLM::stats_async and reset_prefix_cache_async (api/engine_calls): an engine that
// answers is merged in, and one that terminates before it answers (a replica torn down while its worker restarts)
// settles its reply at once, not after engine_call_timeout.
#include "api/engine_calls.hpp"
#include "actorllm/proto/type_ids.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// A callback's argument, waited for with a deadline; `took` is how long it came after `start()`.
template <class T>
struct callback_result {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<T> value;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::chrono::duration<double> took{};

  void set(T v) {
    std::lock_guard lock{mutex};
    value = std::move(v);
    took = std::chrono::steady_clock::now() - started;
    cv.notify_all();
  }
  T wait() {
    std::unique_lock lock{mutex};
    REQUIRE(cv.wait_for(lock, 30s, [this] { return value.has_value(); }));
    return *value;
  }
};

/// An engine stand-in that answers stats with `n_running` running and a reset with `forgotten`.
proto::engine_actor answering_engine(caf::actor_system& sys, int32_t n_running, int32_t forgotten) {
  return caf::actor_cast<proto::engine_actor>(
      sys.spawn([n_running, forgotten](caf::event_based_actor*) -> caf::behavior {
        return {
            [n_running](caf::get_atom, proto::stats_atom) {
              engine_stats s;
              s.healthy = true;
              s.n_running = n_running;
              return s;
            },
            [forgotten](proto::reset_prefix_cache_atom) { return forgotten; },
        };
      }));
}

/// An engine stand-in that takes each call as the engine does (a response promise, the answer due from its
/// scheduler) and terminates before it answers, as a replica torn down mid-call does.
proto::engine_actor vanishing_engine(caf::actor_system& sys) {
  return caf::actor_cast<proto::engine_actor>(sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {
        [self](caf::get_atom, proto::stats_atom) -> caf::result<engine_stats> {
          auto rp = self->make_response_promise<engine_stats>();
          self->quit();
          return rp;
        },
        [self](proto::reset_prefix_cache_atom) -> caf::result<int32_t> {
          auto rp = self->make_response_promise<int32_t>();
          self->quit();
          return rp;
        },
    };
  }));
}

struct system_fixture {
  system_fixture() : sys{configure(cfg)} {}
  static caf::actor_system_config& configure(caf::actor_system_config& c) {
    proto::add_message_types(c);
    c.set("scheduler.max-threads", 2);
    return c;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys;
};

}  // namespace

TEST_CASE("ask_stats: answering engines in order, an unasked slot left alone") {
  system_fixture f;
  callback_result<std::vector<detail::stats_answer>> got;
  detail::ask_stats(f.sys, {answering_engine(f.sys, 3, 0), proto::engine_actor{}, answering_engine(f.sys, 5, 0)},
                    [&](std::vector<detail::stats_answer> a) { got.set(std::move(a)); });
  const std::vector<detail::stats_answer> answers = got.wait();
  REQUIRE(answers.size() == 3);
  REQUIRE(answers[0].stats.has_value());
  CHECK(answers[0].stats->n_running == 3);
  CHECK_FALSE(answers[1].asked);
  REQUIRE(answers[2].stats.has_value());
  CHECK(answers[2].stats->n_running == 5);
}

TEST_CASE("ask_stats: an engine that terminates before it answers is settled at once, the others still answer") {
  system_fixture f;
  callback_result<std::vector<detail::stats_answer>> got;
  detail::ask_stats(f.sys, {vanishing_engine(f.sys), answering_engine(f.sys, 2, 0)},
                    [&](std::vector<detail::stats_answer> a) { got.set(std::move(a)); });
  const std::vector<detail::stats_answer> answers = got.wait();
  MESSAGE("answered after " << got.took.count() << " s");
  CHECK(got.took < detail::engine_call_timeout / 2);  // before: the whole 10 s timeout
  REQUIRE(answers.size() == 2);
  CHECK(answers[0].asked);
  CHECK_FALSE(answers[0].stats.has_value());
  CHECK(answers[0].failure.find("the engine did not answer") != std::string::npos);
  REQUIRE(answers[1].stats.has_value());
  CHECK(answers[1].stats->n_running == 2);

  engine_stats base;
  base.replicas.resize(2);
  const engine_stats merged = detail::merge_stats(base, answers);
  CHECK_FALSE(merged.replicas[0].healthy);
  CHECK(merged.replicas[1].healthy);
}

TEST_CASE("ask_stats: an engine already gone is settled at once") {
  system_fixture f;
  const proto::engine_actor gone = vanishing_engine(f.sys);
  {
    caf::scoped_actor self{f.sys};
    self->monitor(gone);
    self->send(gone, caf::get_atom::value, proto::stats_atom::value);  // it takes the call and terminates
    self->receive([](caf::down_msg&) {}, [](const caf::error&) {}, caf::after(10s) >> [] { FAIL("no down message"); });
  }
  callback_result<std::vector<detail::stats_answer>> got;
  detail::ask_stats(f.sys, {gone}, [&](std::vector<detail::stats_answer> a) { got.set(std::move(a)); });
  const std::vector<detail::stats_answer> answers = got.wait();
  CHECK(got.took < detail::engine_call_timeout / 2);
  REQUIRE(answers.size() == 1);
  CHECK_FALSE(answers[0].stats.has_value());
}

TEST_CASE("reset_prefix_caches: an engine that terminates before it answers fails the call at once") {
  system_fixture f;
  callback_result<std::pair<int32_t, std::optional<error>>> got;
  detail::reset_prefix_caches(f.sys, {answering_engine(f.sys, 0, 7), vanishing_engine(f.sys)},
                              [&](int32_t forgotten, std::optional<error> failure) {
                                got.set({forgotten, std::move(failure)});
                              });
  const auto [forgotten, failure] = got.wait();
  CHECK(got.took < detail::engine_call_timeout / 2);
  CHECK(forgotten == 7);
  CHECK(failure.has_value());
}
