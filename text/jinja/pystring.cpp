// Python str semantics over UTF-8.
#include "text/jinja/pystring.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja/error.hpp"

namespace actorllm::text::jinja::pystr {
namespace {

char32_t to_upper_char(char32_t c) {
  if (c < 0x80)
    return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5)
    return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7)
    return c - 32;
  if (c == 0xFF)
    return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
    return (c & 1) ? c - 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
    return (c & 1) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9)
    return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC)
    return 0x386;
  if (c >= 0x3AD && c <= 0x3AF)
    return c - 37;
  if (c == 0x3CC)
    return 0x38C;
  if (c == 0x3CD || c == 0x3CE)
    return c - 63;
  if (c >= 0x430 && c <= 0x44F)
    return c - 32;
  if (c >= 0x450 && c <= 0x45F)
    return c - 80;
  return c;
}

char32_t to_lower_char(char32_t c) {
  if (c < 0x80)
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7)
    return c + 32;
  if (c == 0x178)
    return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
    return (c & 1) ? c : c + 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
    return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
    return c + 32;
  if (c == 0x386)
    return 0x3AC;
  if (c >= 0x388 && c <= 0x38A)
    return c + 37;
  if (c == 0x38C)
    return 0x3CC;
  if (c == 0x38E || c == 0x38F)
    return c + 63;
  if (c >= 0x410 && c <= 0x42F)
    return c + 32;
  if (c >= 0x400 && c <= 0x40F)
    return c + 80;
  return c;
}

bool is_upper_char(char32_t c) { return to_lower_char(c) != c; }
bool is_lower_char(char32_t c) { return to_upper_char(c) != c || c == 0xDF; }
bool is_cased(char32_t c) { return is_upper_char(c) || is_lower_char(c); }

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

template <class F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();)
    append_utf8(out, f(next_char(s, i)));
  return out;
}

// True when the character starting at s[i] is one of `chars` (a set of characters given as a string).
bool in_char_set(std::string_view chars, char32_t c) {
  for (size_t i = 0; i < chars.size();)
    if (next_char(chars, i) == c)
      return true;
  return false;
}

// Byte length of the whitespace-run check: characters are decoded, so multi-byte spaces (U+3000) count.
bool strip_matches(const std::optional<std::string_view>& chars, char32_t c) {
  return chars ? in_char_set(*chars, c) : is_space(c);
}

// Offset of the character that ends at `end` (the start of the last character before end).
size_t previous_char_start(std::string_view s, size_t end) {
  size_t start = end - 1;
  // Walk back over at most three continuation bytes, then check that the lead byte really spans to `end`.
  size_t limit = end >= 4 ? end - 4 : 0;
  while (start > limit && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    --start;
  size_t probe = start;
  next_char(s, probe);
  return probe == end ? start : end - 1;
}

// Stops split/splitlines before they build more parts than the caller allows.
struct part_limit {
  size_t max_parts;
  void add(std::vector<std::string>& parts, std::string_view part) const {
    if (parts.size() >= max_parts)
      throw value_error("splitting gives more than " + std::to_string(max_parts) + " parts", error_kind::limit);
    parts.emplace_back(part);
  }
};

template <class Pred>
bool all_chars(std::string_view s, Pred pred) {
  if (s.empty())
    return false;
  for (size_t i = 0; i < s.size();)
    if (!pred(next_char(s, i)))
      return false;
  return true;
}

}  // namespace

char32_t next_char(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  size_t n = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    ++i;
    return c;
  }
  if (i + n > s.size()) {
    ++i;
    return c;
  }
  for (size_t k = 1; k < n; ++k) {
    auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return c;
  }
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF)
      c = 0xFFFD;
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out += "\xEF\xBF\xBD";
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80)
      return false;
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s))
    return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n)
    next_char(s, i);
  return n;
}

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    next_char(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right) {
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strip_matches(chars, next_char(s, next)))
        break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = previous_char_start(s, end);
      size_t probe = start;
      if (!strip_matches(chars, next_char(s, probe)))
        break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                               size_t max_parts) {
  std::vector<std::string> parts;
  part_limit limit{max_parts};
  if (sep) {
    if (sep->empty())
      throw value_error("empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos)
        break;
      limit.add(parts, s.substr(start, hit - start));
      start = hit + sep->size();
    }
    limit.add(parts, s.substr(start));
    return parts;
  }
  size_t i = 0;
  while (i < s.size()) {
    // Skip a whitespace run.
    while (i < s.size()) {
      size_t next = i;
      if (!is_space(next_char(s, next)))
        break;
      i = next;
    }
    if (i >= s.size())
      break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      limit.add(parts, s.substr(i));
      return parts;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t next = i;
      if (is_space(next_char(s, next)))
        break;
      i = next;
    }
    limit.add(parts, s.substr(start, i - start));
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                                size_t max_parts) {
  std::vector<std::string> parts;
  part_limit limit{max_parts};
  if (sep) {
    if (sep->empty())
      throw value_error("empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size())
        break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos)
        break;
      limit.add(parts, s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    limit.add(parts, s.substr(0, end));
    return {parts.rbegin(), parts.rend()};
  }
  size_t end = s.size();
  while (end > 0) {
    while (end > 0) {
      size_t start = previous_char_start(s, end);
      size_t probe = start;
      if (!is_space(next_char(s, probe)))
        break;
      end = start;
    }
    if (end == 0)
      break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      limit.add(parts, s.substr(0, end));
      break;
    }
    size_t begin = end;
    while (begin > 0) {
      size_t start = previous_char_start(s, begin);
      size_t probe = start;
      if (is_space(next_char(s, probe)))
        break;
      begin = start;
    }
    limit.add(parts, s.substr(begin, end - begin));
    end = begin;
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends, size_t max_parts) {
  std::vector<std::string> lines;
  part_limit limit{max_parts};
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t char_start = i;
    char32_t c = next_char(s, i);
    if (!is_line_break(c))
      continue;
    if (c == '\r' && i < s.size() && s[i] == '\n')
      ++i;
    limit.add(lines, s.substr(start, (keepends ? i : char_start) - start));
    start = i;
  }
  if (start < s.size())
    limit.add(lines, s.substr(start));
  return lines;
}

std::string upper(std::string_view s) { return map_chars(s, to_upper_char); }
std::string lower(std::string_view s) { return map_chars(s, to_lower_char); }

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_char(s, i);
    append_utf8(out, first ? to_upper_char(c) : to_lower_char(c));
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_char(s, i);
    append_utf8(out, previous_cased ? to_lower_char(c) : to_upper_char(c));
    previous_cased = is_cased(c);
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count,
                    size_t max_bytes) {
  std::string out;
  auto append = [&](std::string_view piece) {
    if (out.size() + piece.size() > max_bytes)
      throw value_error("replace(): result exceeds the string size limit", error_kind::limit);
    out.append(piece);
  };
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts the replacement before every character and at the end.
    size_t i = 0;
    while (i < s.size() && (count < 0 || done < count)) {
      append(new_text);
      ++done;
      size_t start = i;
      next_char(s, i);
      append(s.substr(start, i - start));
    }
    if (i >= s.size() && (count < 0 || done < count))
      append(new_text);
    append(s.substr(i));
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_text, start);
    if (hit == std::string_view::npos)
      break;
    append(s.substr(start, hit - start));
    append(new_text);
    start = hit + old_text.size();
    ++done;
  }
  append(s.substr(start));
  return out;
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = next_char(s, i);
    bool invalid_byte = (i - start == 1) && c >= 0x80;
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (invalid_byte || c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c == 0x2028 || c == 0x2029 || c == 0xFEFF || (c >= 0x200B && c <= 0x200F)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back(quote);
  return out;
}

std::string format_float(double x) {
  if (std::isnan(x))
    return "nan";
  if (std::isinf(x))
    return x < 0 ? "-inf" : "inf";
  if (x == 0)
    return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form ("d.ddde±XX"), then laid out the way Python's repr does.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos))
    if (c != '.')
      digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exponent);
  int decpt = exponent + 1;  // position of the decimal point relative to the first digit
  auto ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (ndigits > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
    out += buf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt));
  }
  return out;
}

bool is_digit_string(std::string_view s) {
  return all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; });
}
bool is_alpha_string(std::string_view s) {
  return all_chars(s, [](char32_t c) { return is_cased(c) || (c >= 0x80 && !is_space(c)); });
}
bool is_alnum_string(std::string_view s) {
  return all_chars(s, [](char32_t c) { return (c >= '0' && c <= '9') || is_cased(c) || (c >= 0x80 && !is_space(c)); });
}
bool is_space_string(std::string_view s) { return all_chars(s, is_space); }

bool is_lower_string(std::string_view s) {
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_char(s, i);
    if (is_upper_char(c))
      return false;
    any_cased = any_cased || is_lower_char(c);
  }
  return any_cased;
}

bool is_upper_string(std::string_view s) {
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_char(s, i);
    if (is_lower_char(c) && !is_upper_char(c))
      return false;
    any_cased = any_cased || is_upper_char(c);
  }
  return any_cased;
}

}  // namespace actorllm::text::jinja::pystr
