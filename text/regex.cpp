// PCRE2 wrapper: compile with JIT, match with per-thread match data and JIT stack.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include "text/tokenizer_error.hpp"
#include "util/utf8.hpp"

#include <pcre2.h>

namespace actorllm::text {
namespace {

// Oniguruma's \s is White_Space, which includes U+0085 (NEL); PCRE2's UCP \s is Z + \t\n\v\f\r and does not.
// Rewrite \s / \S so both engines split text the same way. Inside a class only \s can be widened this way; a
// negated \S inside a class has no rewrite and keeps PCRE2's meaning (no tokenizer we know uses it).
std::string onig_compatible(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      ++i;
      if (n == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        out += ']';
        ++i;
      }
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // POSIX class [:name:] inside a bracket expression: copy through its closing ":]".
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']')
      in_class = false;
    out += c;
  }
  return out;
}

// Per-thread scratch for matching: PCRE2 match data and match context must not be shared between threads.
struct thread_matcher {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  thread_matcher() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (context != nullptr && stack != nullptr)
      pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~thread_matcher() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  thread_matcher(const thread_matcher&) = delete;
  thread_matcher& operator=(const thread_matcher&) = delete;
};

thread_matcher& matcher() {
  thread_local thread_matcher m;
  return m;
}

}  // namespace

void regex::code_deleter::operator()(void* code) const { pcre2_code_free(static_cast<pcre2_code*>(code)); }

regex regex::compile(std::string_view pattern, std::string_view what) {
  const std::string translated = onig_compatible(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof buffer);
    throw tokenizer_error(std::string{what} + ": invalid regex \"" + std::string{pattern} +
                          "\": " + reinterpret_cast<const char*>(buffer) + " (at offset " +
                          std::to_string(error_offset) + " of the translated pattern)");
  }
  regex r;
  r.pattern_ = std::string{pattern};
  r.code_ = std::shared_ptr<void>(code, code_deleter{});
  // JIT is an optimisation: when the platform lacks it, the interpreter gives the same matches.
  r.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

bool regex::find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const {
  if (start > subject.size())
    return false;
  auto* code = static_cast<pcre2_code*>(code_.get());
  thread_matcher& m = matcher();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = PCRE2_ERROR_NOMATCH;
  if (jit_)
    rc = pcre2_jit_match(code, data, subject.size(), start, 0, m.data, m.context);
  // NO_UTF_CHECK: callers pass well-formed UTF-8 (encode repairs its input first); without it PCRE2 would
  // re-validate the whole subject on every call, which is quadratic over a document.
  if (!jit_ || (rc < 0 && rc != PCRE2_ERROR_NOMATCH))
    rc = pcre2_match(code, data, subject.size(), start, PCRE2_NO_UTF_CHECK, m.data, m.context);
  // Any other failure (resource limits on pathological input) ends matching: the rest of the text then stays one
  // unsplit piece, which still encodes and decodes losslessly.
  if (rc < 0)
    return false;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(m.data);
  match_begin = ovector[0];
  match_end = ovector[1];
  return true;
}

size_t regex::next_boundary(std::string_view s, size_t i) {
  ++i;
  while (i < s.size() && is_utf8_continuation(static_cast<unsigned char>(s[i])))
    ++i;
  return i;
}

}  // namespace actorllm::text
