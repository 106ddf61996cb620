// admission_gate (--max-queued-requests): a bounded count of in-flight requests whose slots are never leaked.
#include "net/admission.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

using actorllm::net::admission_gate;

TEST_CASE("admission_gate admits up to its limit and refuses the rest until a slot is released") {
  admission_gate gate{2};
  auto a = gate.try_enter();
  auto b = gate.try_enter();
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(gate.try_enter());
  CHECK(gate.active() == 2);
  a->release();
  CHECK(gate.active() == 1);
  a->release();  // twice is once
  CHECK(gate.active() == 1);
  auto c = gate.try_enter();
  CHECK(c);
  CHECK_FALSE(gate.try_enter());
}

TEST_CASE("admission_gate slots release on destruction and on move-assignment, and may outlive the gate") {
  std::optional<admission_gate::slot> kept;
  {
    admission_gate gate{1};
    {
      auto a = gate.try_enter();
      REQUIRE(a);
      CHECK_FALSE(gate.try_enter());
    }
    CHECK(gate.active() == 0);
    admission_gate::slot holder;
    CHECK_FALSE(holder.held());
    holder = std::move(*gate.try_enter());
    CHECK(holder.held());
    CHECK(gate.active() == 1);
    holder = admission_gate::slot{};  // assigning over a held slot gives it back
    CHECK(gate.active() == 0);
    kept = gate.try_enter();
  }
  REQUIRE(kept);
  kept->release();  // the gate is gone; the shared count is not
  CHECK_FALSE(kept->held());
}

TEST_CASE("admission_gate with a zero limit refuses everything and a negative one refuses nothing") {
  admission_gate none{0};
  CHECK_FALSE(none.try_enter());
  admission_gate unlimited{-1};
  std::vector<admission_gate::slot> slots;
  for (int i = 0; i < 1000; ++i)
    slots.push_back(std::move(*unlimited.try_enter()));
  CHECK(unlimited.active() == 1000);
  slots.clear();
  CHECK(unlimited.active() == 0);
}

TEST_CASE("admission_gate never admits more than its limit under contention") {
  admission_gate gate{8};
  std::atomic<int> admitted{0};
  std::atomic<int> over{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (auto s = gate.try_enter()) {
          admitted.fetch_add(1);
          if (gate.active() > 8)
            over.fetch_add(1);
        }
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(admitted.load() > 0);
  CHECK(over.load() == 0);
  CHECK(gate.active() == 0);
}

TEST_CASE("admission_gate counts sequences: a request weighs n x prompts and fits only beside what is admitted") {
  admission_gate gate{10};
  auto a = gate.try_enter(6);
  REQUIRE(a);
  CHECK(a->weight() == 6);
  CHECK(gate.active() == 6);
  CHECK_FALSE(gate.try_enter(5));  // 6 + 5 > 10: one request cannot slip 5 sequences past the bound as "one"
  auto b = gate.try_enter(4);
  REQUIRE(b);
  CHECK(gate.active() == 10);
  CHECK_FALSE(gate.try_enter());
  a->release();
  CHECK(gate.active() == 4);
  CHECK_FALSE(gate.try_enter(11));  // over the whole limit: never fits
  admission_gate unlimited{-1};
  auto c = unlimited.try_enter(1000000);
  REQUIRE(c);
  CHECK(unlimited.active() == 1000000);
}
