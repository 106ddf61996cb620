// A regular expression compiled to a deterministic automaton over bytes: the core of structured outputs (every
// constraint, a JSON schema, a choice or a regex, becomes one pattern; the token masks walk its states).
//
// Syntax (the subset JSON-schema patterns and vLLM's guided_regex use): literals, `.`, escapes
// \d \w \s \D \W \S and \n \t \r \f \v \0 \xHH and escaped punctuation, classes `[a-z_]` / `[^"\\]`, groups `( )` and
// `(?: )`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (greedy or lazy: the automaton has no preference),
// anchors `^` at the start and `$` at the end (the whole output always has to match). Backreferences, lookaround
// and named classes are refused with a regex_error naming them. The match is over bytes: non-ASCII literals are
// their UTF-8 bytes. Wildcards (`.`, negated classes, \D \W \S) stand for printable ASCII other than '"' and '\\'
// (a pattern embedded in a JSON string then keeps it a valid string); write other characters literally.
//
// Compiling is bounded by structured_limits (nesting depth at parse time, NFA size, DFA states, state-set memory
// and a work budget, all checked as they grow), so any pattern ends in an automaton or a regex_error naming the
// limit, quickly. The table is indexed by byte class (bytes no pattern set tells apart share a column).
#pragma once

#include "text/structured/structured_limits.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text::structured {

/// A pattern this engine cannot compile; what() names the construct and where.
class regex_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A DFA over bytes with a dead state; immutable once built, safe to share between threads.
class byte_dfa {
 public:
  static constexpr int32_t dead = -1;

  /// Compiles `pattern` (whole-output match). Throws regex_error for unsupported syntax or when the pattern passes
  /// one of `limits` (the message names the limit and its `serve` flag).
  static byte_dfa compile(std::string_view pattern, const structured_limits& limits = {});
  /// Parses `pattern` only (syntax, nesting and size against `limits`); throws what compile() throws for those.
  static void check_syntax(std::string_view pattern, const structured_limits& limits = {});

  int32_t start() const { return 0; }
  /// The state after `byte` from `state` (dead: no match can continue).
  int32_t next(int32_t state, uint8_t byte) const {
    return table_[static_cast<std::size_t>(state) * n_classes_ + class_of_[byte]];
  }
  /// The state after every byte of `bytes` (dead as soon as one fails).
  int32_t walk(int32_t state, std::string_view bytes) const;
  /// Whether the input so far is a whole match.
  bool accepting(int32_t state) const { return accept_[static_cast<std::size_t>(state)] != 0; }
  /// How many states (states that cannot reach a match are pruned: from every state some continuation matches).
  std::size_t n_states() const { return accept_.size(); }
  /// Whether `text` matches the whole pattern.
  bool matches(std::string_view text) const;
  /// The bytes the automaton holds (what a cache of compiled constraints counts).
  std::size_t memory_bytes() const { return table_.size() * sizeof(int32_t) + accept_.size() + sizeof(*this); }

 private:
  std::vector<int32_t> table_;  // n_states * n_classes_
  std::vector<uint8_t> accept_;
  std::array<uint8_t, 256> class_of_{};  // byte -> its column
  std::size_t n_classes_ = 1;
};

/// Checks a regex a request gives before it becomes the request's pattern: refused (regex_error naming the limit)
/// when longer than `limits.max_bytes`, or by byte_dfa::check_syntax (syntax, nesting).
void check_regex(std::string_view regex, const structured_limits& limits = {});

/// `s` with every regex metacharacter escaped (a literal inside a pattern).
std::string regex_escape(std::string_view s);

}  // namespace actorllm::text::structured
