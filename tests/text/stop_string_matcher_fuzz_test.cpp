// The stop-string matcher against a naive reference: random stop sets (duplicates, prefixes of each other, empty
// strings, multi-byte UTF-8) and random texts cut into random deltas. After every delta the released text, the
// matched stop string and the held-back tail must be what rescanning the whole text says. Tagged [asan]: CI also
// runs it under AddressSanitizer and UndefinedBehaviorSanitizer. Plus the cost: 100,000 stop strings must not make a
// token cost more than a few ones do.
#include "text/stop_string_matcher.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

using actorllm::text::stop_string_matcher;

namespace {

/// The matcher's contract, computed from the whole text after every delta.
class reference_matcher {
 public:
  reference_matcher(std::vector<std::string> stops, bool include) : stops_(std::move(stops)), include_(include) {}

  stop_string_matcher::result push(const std::string& delta) {
    stop_string_matcher::result r;
    if (stopped_ || delta.empty())
      return r;
    text_ += delta;
    // The earliest occurrence anywhere in the text (none ended before, or an earlier push would have stopped),
    // ties to the stop string listed first.
    std::size_t best_pos = std::string::npos;
    std::size_t best = 0;
    for (std::size_t i = 0; i < stops_.size(); ++i) {
      if (stops_[i].empty())
        continue;
      const std::size_t pos = text_.find(stops_[i]);
      if (pos < best_pos) {
        best_pos = pos;
        best = i;
      }
    }
    if (best_pos != std::string::npos) {
      const std::size_t end = std::max(include_ ? best_pos + stops_[best].size() : best_pos, released_);
      r.text = text_.substr(released_, end - released_);
      r.stop_index = best;
      stopped_ = true;
      return r;
    }
    std::size_t hold = 0;
    if (!include_)
      for (const std::string& s : stops_)
        for (std::size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text_.size()); k > hold; --k)
          if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
            hold = k;
            break;
          }
    const std::size_t upto = text_.size() - hold;
    REQUIRE(upto >= released_);  // released text is never taken back
    r.text = text_.substr(released_, upto - released_);
    released_ = upto;
    return r;
  }

  std::string finish() {
    if (stopped_)
      return {};
    std::string rest = text_.substr(released_);
    released_ = text_.size();
    return rest;
  }

 private:
  std::vector<std::string> stops_;
  bool include_;
  std::string text_;
  std::size_t released_ = 0;
  bool stopped_ = false;
};

std::string random_string(std::mt19937& rng, const std::vector<std::string>& alphabet, std::size_t max_len) {
  std::string s;
  const std::size_t len = std::uniform_int_distribution<std::size_t>{0, max_len}(rng);
  for (std::size_t i = 0; i < len; ++i)
    s += alphabet[std::uniform_int_distribution<std::size_t>{0, alphabet.size() - 1}(rng)];
  return s;
}

}  // namespace

TEST_CASE("stop strings: random stop sets and deltas agree with a rescan of the whole text [asan]") {
  std::mt19937 rng{20261128};
  // Few letters, so that stop strings overlap, repeat and prefix each other; one multi-byte character and a NUL.
  const std::vector<std::string> alphabets[] = {
      {"a", "b"}, {"a", "b", "c"}, {"a", "b", "\xc3\xa9", std::string(1, '\0')}, {"ab", "a", "ba", "b", "x"}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{3};
  int runs = 0;
  while (runs < 20000 && (runs < 500 || std::chrono::steady_clock::now() < deadline)) {
    ++runs;
    const auto& alphabet = alphabets[static_cast<std::size_t>(runs) % std::size(alphabets)];
    std::vector<std::string> stops;
    const std::size_t n_stops = std::uniform_int_distribution<std::size_t>{0, 8}(rng);
    for (std::size_t i = 0; i < n_stops; ++i) {
      stops.push_back(random_string(rng, alphabet, 6));
      if (!stops.empty() && std::uniform_int_distribution<int>{0, 9}(rng) == 0)
        stops.push_back(stops[std::uniform_int_distribution<std::size_t>{0, stops.size() - 1}(rng)]);  // duplicate
    }
    const bool include = std::uniform_int_distribution<int>{0, 1}(rng) == 1;
    stop_string_matcher m{stops, include};
    reference_matcher ref{stops, include};
    std::string released, expected;
    const std::size_t n_deltas = std::uniform_int_distribution<std::size_t>{1, 12}(rng);
    bool stopped = false;
    for (std::size_t d = 0; d < n_deltas && !stopped; ++d) {
      const std::string delta = random_string(rng, alphabet, 5);
      auto got = m.push(delta);
      auto want = ref.push(delta);
      INFO("run " << runs << " delta " << d << " include " << include);
      REQUIRE(got.text == want.text);
      REQUIRE(got.stop_index == want.stop_index);
      REQUIRE(m.stopped() == want.stop_index.has_value());
      stopped = want.stop_index.has_value();
    }
    if (stopped)
      CHECK(m.push("more").text.empty());
    REQUIRE(m.finish() == ref.finish());
  }
  MESSAGE(runs << " random stop sets checked");
}

TEST_CASE("stop strings: a copy shares the stop set but keeps its own state") {
  stop_string_matcher a{{"STOP", "ST"}};
  CHECK(a.push("xS").text == "x");
  stop_string_matcher b = a;
  CHECK(b.push("TOP").stop_index == 0u);  // "ST" and "STOP" both start at the S: the one listed first wins
  CHECK(a.push("y").text == "Sy");
  CHECK_FALSE(a.stopped());
}

TEST_CASE("stop strings: 100,000 stop strings cost a token about what 10 do") {
  std::vector<std::string> many;
  many.reserve(100000);
  std::mt19937 rng{7};
  for (int i = 0; i < 100000; ++i)
    many.push_back("stop word " + std::to_string(rng()));
  const auto t0 = std::chrono::steady_clock::now();
  stop_string_matcher m{many};
  const auto built = std::chrono::steady_clock::now();
  std::vector<stop_string_matcher> seqs(256, m);  // n = 256 sequences share the automaton
  std::size_t released = 0;
  for (int token = 0; token < 200; ++token)
    for (auto& s : seqs)
      released += s.push(token % 7 == 0 ? " stop " : " word").text.size();
  const auto ran = std::chrono::steady_clock::now();
  CHECK(released > 0);
  const double build_s = std::chrono::duration<double>(built - t0).count();
  const double run_s = std::chrono::duration<double>(ran - built).count();
  MESSAGE("100,000 stop strings: built in " << build_s << " s; 200 tokens x 256 sequences in " << run_s << " s");
  // The old matcher rescanned every stop string per token: about 15 minutes for this; linear is milliseconds.
  CHECK(build_s < 2.0);
  CHECK(run_s < 1.0);
}
