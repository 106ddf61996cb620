// Stop strings for streamed generation (vLLM's `stop` / `include_stop_str_in_output`): text is released only when
// it cannot be the beginning of a stop string, and generation ends at the first stop string found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text {

/// Filters a stream of text deltas against a set of stop strings.
///
/// The earliest occurrence in the text wins (ties: the stop string listed first). Without
/// include_stop_str_in_output the stop string and everything after it are never released, and any suffix that
/// could grow into a stop string is held back until it cannot; with it, text is released at once and the
/// output ends right after the stop string. (vLLM checks its stop strings in list order, which can release an
/// earlier occurrence of a later-listed stop string when both arrive in one delta; the earliest match avoids
/// that.)
///
/// The stop strings are compiled once into an Aho-Corasick automaton, so push() costs O(delta) whatever the number
/// and length of the stop strings (the construction is O(total bytes × log)). Copies share the automaton: the n
/// sequences of one request build it once.
class stop_string_matcher {
 public:
  /// Empty stop strings are ignored.
  explicit stop_string_matcher(std::vector<std::string> stop_strings, bool include_stop_str_in_output = false);

  /// What push() releases.
  struct result {
    /// Text that is safe to emit now.
    std::string text;
    /// Index (into the constructor's list) of the stop string that matched; generation should end.
    std::optional<size_t> stop_index;
  };

  /// Feeds the next delta. After a match every further call returns empty text.
  result push(std::string_view delta);

  /// Releases the held-back text when generation ends without a match.
  std::string finish();

  /// True once a stop string has matched.
  bool stopped() const { return stopped_; }

 private:
  struct automaton;

  std::shared_ptr<const automaton> automaton_;  // null: no stop strings
  bool include_;
  uint32_t state_ = 0;  // the automaton's node: the longest suffix of the text that begins some stop string
  std::string held_;    // the text not released yet: the state's string (always empty with include_)
  bool stopped_ = false;
};

}  // namespace actorllm::text
