// The template lexer, after Jinja 3's (jinja2/lexer.py): same tag and whitespace rules, hand-written instead of
// regex-driven.
#include "text/jinja/lexer.hpp"
#include "util/hex.hpp"

#include <limits>
#include <optional>

#include "text/jinja/pystring.hpp"

namespace actorllm::text::jinja {
namespace {

bool is_name_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
bool is_name_char(unsigned char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

constexpr int hex_value(char c) { return hex_digit_value(c); }

// Jinja splits on \r\n, \r and \n and joins with \n, dropping one trailing newline unless asked to keep it.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n')
        ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

class lexer {
 public:
  lexer(std::string_view source, const lexer_options& options, const std::string& name)
      : src_(normalize_newlines(source, options.keep_trailing_newline)), options_(options), name_(name) {}

  std::vector<token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_text(pos_, src_.size());
        pos_ = src_.size();
        break;
      }
      char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : '\0';
      size_t text_end = strip_before_tag(pos_, tag, sign, kind != '{');
      emit_text(pos_, text_end);
      if (sign != '\0')
        ++after;
      if (kind == '%') {
        if (auto raw_end = match_raw_begin(after)) {
          lex_raw(tag, *raw_end);
          continue;
        }
      }
      if (kind == '#')
        lex_comment(tag, after);
      else
        lex_tag(tag, after, kind == '{');
    }
    push(token_kind::eof, {}, src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  // End of the text [begin, tag) after the whitespace control of the tag that follows it: `-` strips all
  // trailing whitespace; otherwise lstrip_blocks removes the blanks between the last line start and a block or
  // comment tag, if nothing else is on that line.
  size_t strip_before_tag(size_t begin, size_t tag, char sign, bool is_block_or_comment) const {
    std::string_view text(src_.data() + begin, tag - begin);
    if (sign == '-')
      return begin + pystr::strip(text, std::nullopt, false, true).size();
    if (sign == '+' || !options_.lstrip_blocks || !is_block_or_comment)
      return tag;
    size_t line_start = text.rfind('\n');
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    if (line_start == 0 && !line_starting_)
      return tag;
    std::string_view tail = text.substr(line_start);
    if (tail.empty() || !pystr::is_space_string(tail))
      return tag;
    return begin + line_start;
  }

  // Skips Python whitespace from `p`.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t next = p;
      if (!pystr::is_space(pystr::next_char(src_, next)))
        break;
      p = next;
    }
    return p;
  }

  bool starts_with(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  // The end of a block-end marker at p ("+%}", "-%}" + whitespace, "%}" + one newline under trim_blocks), or npos.
  size_t match_block_end(size_t p) const {
    if (starts_with(p, "+%}"))
      return p + 3;
    if (starts_with(p, "-%}"))
      return skip_space(p + 3);
    if (starts_with(p, "%}")) {
      p += 2;
      if (options_.trim_blocks && p < src_.size() && src_[p] == '\n')
        ++p;
      return p;
    }
    return std::string::npos;
  }

  // `{% raw %}`: after the `{%` and its sign, optional blanks, "raw", blanks, then `-%}` or `%}` (trim_blocks does
  // not apply here, as in Jinja). Returns the offset after the tag.
  std::optional<size_t> match_raw_begin(size_t p) const {
    p = skip_space(p);
    if (!starts_with(p, "raw"))
      return std::nullopt;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}"))
      return skip_space(p + 3);
    if (starts_with(p, "%}"))
      return p + 2;
    return std::nullopt;
  }

  void lex_raw(size_t tag, size_t body_begin) {
    line_starting_ = src_[body_begin - 1] == '\n';
    for (size_t p = src_.find("{%", body_begin); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : '\0';
      if (sign != '\0')
        ++q;
      q = skip_space(q);
      if (!starts_with(q, "endraw"))
        continue;
      size_t end = match_block_end(skip_space(q + 6));
      if (end == std::string::npos)
        continue;
      emit_text(body_begin, strip_before_tag(body_begin, p, sign, true));
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    fail(tag, "missing end of raw directive");
  }

  void lex_comment(size_t tag, size_t content_begin) {
    size_t close = src_.find("#}", content_begin);
    if (close == std::string::npos)
      fail(tag, "missing end of comment tag");
    char sign = (close > content_begin && (src_[close - 1] == '-' || src_[close - 1] == '+')) ? src_[close - 1] : '\0';
    size_t end = close + 2;
    if (sign == '-')
      end = skip_space(end);
    else if (sign == '\0' && options_.trim_blocks && end < src_.size() && src_[end] == '\n')
      ++end;
    pos_ = end;
    line_starting_ = src_[end - 1] == '\n';
  }

  void lex_tag(size_t tag, size_t p, bool is_variable) {
    push(is_variable ? token_kind::variable_begin : token_kind::block_begin, is_variable ? "{{" : "{%", tag);
    std::string balance;  // expected closing brackets
    while (true) {
      p = skip_space(p);
      if (p >= src_.size())
        fail(tag, std::string("unexpected end of template, missing '") + (is_variable ? "}}" : "%}") + "'");
      if (balance.empty()) {
        if (is_variable) {
          if (starts_with(p, "-}}") || starts_with(p, "}}")) {
            push(token_kind::variable_end, "}}", p);
            size_t end = src_[p] == '-' ? skip_space(p + 3) : p + 2;
            pos_ = end;
            line_starting_ = src_[end - 1] == '\n';
            return;
          }
        } else if (size_t end = match_block_end(p); end != std::string::npos) {
          push(token_kind::block_end, "%}", p);
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return;
        }
      }
      p = lex_expression_token(p, balance);
    }
  }

  size_t lex_expression_token(size_t p, std::string& balance) {
    auto c = static_cast<unsigned char>(src_[p]);
    if (is_digit(c))
      return lex_number(p);
    if (is_name_start(c)) {
      size_t end = p + 1;
      while (end < src_.size() && is_name_char(static_cast<unsigned char>(src_[end])))
        ++end;
      push(token_kind::name, src_.substr(p, end - p), p);
      return end;
    }
    if (c == '\'' || c == '"')
      return lex_string(p);
    static constexpr std::string_view two_char_ops[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : two_char_ops) {
      if (starts_with(p, op)) {
        push(token_kind::op, std::string(op), p);
        return p + 2;
      }
    }
    static constexpr std::string_view one_char_ops = "+-/*%~[](){}><=.:|,;";
    if (one_char_ops.find(static_cast<char>(c)) == std::string_view::npos)
      fail(p, std::string("unexpected character '") + static_cast<char>(c) + "'");
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty())
        fail(p, std::string("unexpected '") + static_cast<char>(c) + "'");
      if (balance.back() != static_cast<char>(c))
        fail(p, std::string("unexpected '") + static_cast<char>(c) + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    push(token_kind::op, std::string(1, static_cast<char>(c)), p);
    return p + 1;
  }

  // Digits with optional single underscores between them, from p; returns the end (p when none).
  size_t scan_digits(size_t p, int base) const {
    size_t end = p;
    while (end < src_.size()) {
      char c = src_[end];
      int d = hex_value(c);
      if (d >= 0 && d < base) {
        ++end;
      } else if (c == '_' && end > p && end + 1 < src_.size() && hex_value(src_[end + 1]) >= 0 &&
                 hex_value(src_[end + 1]) < base) {
        ++end;
      } else {
        break;
      }
    }
    return end;
  }

  size_t lex_number(size_t p) {
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char prefix = static_cast<char>(src_[p + 1] | 0x20);
      int base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : prefix == 'b' ? 2 : 0;
      if (base != 0) {
        size_t digits_begin = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '_' ? 1 : 0);
        size_t end = scan_digits(digits_begin, base);
        if (end == digits_begin)
          fail(p, "invalid integer literal");
        uint64_t v = 0;
        for (size_t i = digits_begin; i < end; ++i) {
          if (src_[i] == '_')
            continue;
          if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - hex_value(src_[i])) / base)
            fail(p, "integer literal too large");
          v = v * base + hex_value(src_[i]);
        }
        push(token_kind::integer, std::to_string(v), p);
        return end;
      }
    }
    size_t end = scan_digits(p, 10);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1]) && !(p > 0 && src_[p - 1] == '.')) {
      end = scan_digits(end + 1, 10);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] | 0x20) == 'e') {
      size_t q = end + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-'))
        ++q;
      size_t exp_end = scan_digits(q, 10);
      if (exp_end > q) {
        end = exp_end;
        is_float = true;
      }
    }
    std::string spelling;
    for (size_t i = p; i < end; ++i)
      if (src_[i] != '_')
        spelling.push_back(src_[i]);
    if (!is_float) {
      // Reject values past int64 here, where the column is known.
      std::string_view digits = spelling;
      size_t first = digits.find_first_not_of('0');
      digits = first == std::string_view::npos ? "0" : digits.substr(first);
      if (digits.size() > 19 || (digits.size() == 19 && digits > "9223372036854775807"))
        fail(p, "integer literal too large");
      spelling = std::string(digits);
    }
    push(is_float ? token_kind::floating : token_kind::integer, std::move(spelling), p);
    return end;
  }

  // A string literal with Python's escapes (Jinja decodes with "unicode-escape").
  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string out;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size())
        fail(p, "unterminated string literal");
      char c = src_[i];
      if (c == quote)
        break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size())
        fail(p, "unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < digits; ++k) {
            int d = i < src_.size() ? hex_value(src_[i]) : -1;
            if (d < 0)
              fail(i - 2 - k, std::string("truncated \\") + e + " escape");
            cp = cp * 16 + static_cast<char32_t>(d);
            ++i;
          }
          if (cp > 0x10FFFF)
            fail(i - 2 - digits, "illegal Unicode character in escape");
          pystr::append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            pystr::append_utf8(out, cp);
          } else {
            // Python keeps unknown escapes as written.
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    push(token_kind::string, std::move(out), p);
    return i + 1;
  }

  void emit_text(size_t begin, size_t end) {
    if (end > begin)
      push(token_kind::text, src_.substr(begin, end - begin), begin);
  }

  void push(token_kind kind, std::string text, size_t offset) {
    tokens_.push_back(token{kind, std::move(text), position_of(offset)});
  }

  // Line and column of `offset`; offsets arrive in increasing order, so this walks the source once.
  source_pos position_of(size_t offset) {
    if (offset < cursor_) {
      cursor_ = 0;
      line_ = 1;
      column_ = 1;
    }
    for (; cursor_ < offset && cursor_ < src_.size(); ++cursor_) {
      auto c = static_cast<unsigned char>(src_[cursor_]);
      if (c == '\n') {
        ++line_;
        column_ = 1;
      } else if ((c & 0xC0) != 0x80) {
        ++column_;
      }
    }
    return {line_, column_};
  }

  [[noreturn]] void fail(size_t offset, std::string message) {
    throw template_error(error_kind::syntax, name_, position_of(offset), std::move(message));
  }

  std::string src_;
  const lexer_options& options_;
  const std::string& name_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<token> tokens_;
  size_t cursor_ = 0;
  uint32_t line_ = 1;
  uint32_t column_ = 1;
};

}  // namespace

std::vector<token> tokenize(std::string_view source, const lexer_options& options, const std::string& source_name) {
  return lexer(source, options, source_name).run();
}

std::string describe(const token& t) {
  switch (t.kind) {
    case token_kind::text:
      return "template text";
    case token_kind::variable_begin:
      return "'{{'";
    case token_kind::variable_end:
      return "'}}'";
    case token_kind::block_begin:
      return "'{%'";
    case token_kind::block_end:
      return "'%}'";
    case token_kind::string:
      return "string literal";
    case token_kind::integer:
    case token_kind::floating:
      return "number " + t.text;
    case token_kind::eof:
      return "end of template";
    default:
      return "'" + t.text + "'";
  }
}

}  // namespace actorllm::text::jinja
