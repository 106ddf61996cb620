// The limits that keep compiling a structured-output constraint (a regex, a JSON schema, a choice list) bounded in
// time and memory whatever a request sends: each one a `serve` flag, checked before or while the work it guards
// runs, so a hostile pattern is refused in well under a second with an error naming the limit and its flag.
#pragma once

#include <cstddef>
#include <cstdint>

namespace actorllm::text::structured {

/// Bounds on one constraint's text, nesting and compilation. The defaults are `serve`'s.
struct structured_limits {
  /// --max-structured-output-bytes: the longest regex, JSON schema or choice list (its JSON text) a request may give.
  /// A pattern generated from a schema may be up to 16 times as long (pattern_bytes()).
  std::size_t max_bytes = 65536;
  /// --max-structured-output-depth: how deep groups and quantifiers may nest in a regex (a stacked quantifier that
  /// cannot be collapsed counts as a level), and how deep a JSON schema may nest (each property, item, anyOf
  /// option and $ref a level). Every recursion after the parser is bounded by it.
  std::size_t max_depth = 64;
  /// --max-structured-output-states: the most states of the compiled automaton. It also bounds the construction's
  /// memory: the NFA at 8 states per DFA state allowed (nfa_states()), the state sets at 256 entries each
  /// (set_entries()), the transition table at states x byte classes (at most 256).
  std::size_t max_states = 50000;
  /// --structured-output-compile-budget: the most work units (NFA states visited or copied, table cells filled) one
  /// compilation may spend; deterministic, so a pattern is accepted or refused the same way on every machine and
  /// under any load. A unit is 5 to 10 ns on one core, so the default stops a hostile pattern within about 0.2 s
  /// when the machine is idle; tool_choice "required" over 300 tools needs 5.5 million, "any JSON object" 0.6.
  uint64_t compile_budget = 20'000'000;

  /// The longest pattern a JSON schema may generate (16 x max_bytes), refused while generating.
  std::size_t pattern_bytes() const { return max_bytes * 16; }
  /// The most NFA states (8 x max_states).
  std::size_t nfa_states() const { return max_states * 8; }
  /// The most entries all DFA states' NFA-state sets may hold together (256 x max_states: 4 bytes each).
  std::size_t set_entries() const { return max_states * 256; }
};

/// The largest --max-structured-output-depth `serve` accepts: the compiler's recursions stay a few thousand frames
/// deep (well inside a thread's stack, also under ASan).
inline constexpr std::size_t max_structured_depth_setting = 1000;

}  // namespace actorllm::text::structured
