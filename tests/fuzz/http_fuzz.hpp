// The HTTP fuzzer's campaign: generated cases played by a pool of concurrent clients against one server, with a probe
// every half second that a valid request is still answered. Used by test_net's [asan] test (a bounded run against the
// in-process test_server) and by the standalone fuzz_http (longer runs, or against a running `actorllm serve`).
#pragma once

#include "fuzz/http_mutator.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace actorllm::fuzz {

/// What to fuzz, how long, and what counts as a failure.
struct campaign_options {
  uint64_t seed = 1;                          ///< the whole campaign follows from it
  std::chrono::milliseconds duration{20000};  ///< no new case starts after this
  uint64_t max_inputs = 0;                    ///< stop after this many cases as well (0: no limit)
  uint16_t port = 0;
  target_profile profile;
  std::string probe_target = "/json";  ///< a GET that must answer 200 every half second
  int parallel = 16;                   ///< cases played at once (one connection each)
  /// A connection must be answered or closed within this of the client's last byte; the probe within it too.
  std::chrono::milliseconds hang_bound{5000};
  std::vector<int> allowed_statuses{200, 400, 404, 408, 413, 431, 500};  ///< empty: any
  std::size_t max_failures = 5;                                          ///< stop early after this many
  std::function<void(const std::string&)> progress;                      ///< a line now and then (may be null)
  /// Checked with each probe (e.g. that the in-process server still runs): "" or what is wrong.
  std::function<std::string()> health;
};

/// What a campaign did and found.
struct campaign_report {
  uint64_t seed = 0;
  uint64_t inputs = 0;  ///< cases played (connections)
  uint64_t bytes = 0;   ///< bytes the cases held
  uint64_t probes = 0;
  uint64_t unanswered = 0;           ///< connections closed with no response (truncated, reset or empty input)
  std::map<int, uint64_t> statuses;  ///< responses by status
  std::vector<std::string> failures;
  double seconds = 0;

  /// One paragraph: seed, inputs, rate, statuses, failures.
  std::string summary() const;
};

/// Runs a campaign; failures (with each failing case's seed and bytes) are in the report, never thrown.
campaign_report run_campaign(const campaign_options& options);

/// The seed of case number `index` of the campaign seeded `campaign_seed`.
uint64_t case_seed(uint64_t campaign_seed, uint64_t index);

}  // namespace actorllm::fuzz
