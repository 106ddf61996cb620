// PCRE2 (JIT, UTF + UCP) regular expressions for the patterns found in tokenizer.json files. Hugging Face compiles
// those with Oniguruma; the few places where PCRE2's Unicode classes differ from Oniguruma's are rewritten at
// compile time so both match the same text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace actorllm::text {

/// An immutable compiled pattern; copies share the compiled code and may be used from any thread.
class regex {
 public:
  /// Compiles `pattern`. Throws tokenizer_error naming `what` (e.g. `tokenizer.json: pre_tokenizer Split`) and
  /// PCRE2's message when the pattern is not valid.
  static regex compile(std::string_view pattern, std::string_view what);

  /// The pattern as written in tokenizer.json.
  const std::string& pattern() const { return pattern_; }

  /// Finds the leftmost match at or after `start` (a character boundary) in well-formed UTF-8 `subject`.
  bool find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;

  /// Calls f(begin, end) for each successive non-overlapping match, with Oniguruma's find_iter rule for empty
  /// matches (an empty match right where the previous match ended is skipped).
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    size_t pos = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (pos <= subject.size()) {
      size_t b = 0;
      size_t e = 0;
      if (!find(subject, pos, b, e))
        return;
      if (b == e && have_last && last_end == e) {
        pos = next_boundary(subject, pos);
        continue;
      }
      have_last = true;
      last_end = e;
      pos = e == b ? next_boundary(subject, e) : e;
      f(b, e);
    }
  }

 private:
  struct code_deleter {
    void operator()(void* code) const;
  };
  static size_t next_boundary(std::string_view s, size_t i);

  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace actorllm::text
