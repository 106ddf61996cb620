// progress_bar: counts from many threads add up, and the bar finishes once everything announced is done.
#include "util/progress_bar.hpp"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

using actorllm::util::progress_bar;

TEST_CASE("progress_bar: concurrent advances add up and finish once [asan]") {
  progress_bar bar{"test load"};
  bar.add_total(4 * 1000 * 7);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&bar] {
      for (int i = 0; i < 1000; ++i)
        bar.advance(7);
    });
  for (auto& t : threads)
    t.join();
  CHECK(bar.done() == bar.total());
  CHECK_FALSE(bar.finished());
  bar.finish_if_complete();
  CHECK(bar.finished());
}

TEST_CASE("progress_bar: not finished while a shard's share is outstanding, restarts after a finish") {
  progress_bar bar{"test load"};
  bar.add_total(100);
  bar.add_total(50);  // a second shard announces before the first completes
  bar.advance(100);
  bar.finish_if_complete();
  CHECK_FALSE(bar.finished());
  bar.advance(50);
  bar.finish_if_complete();
  CHECK(bar.finished());
  // A restarted worker loads again: the bar counts the new round from zero.
  bar.add_total(10);
  CHECK(bar.total() == 10);
  CHECK(bar.done() == 0);
  CHECK_FALSE(bar.finished());
}
