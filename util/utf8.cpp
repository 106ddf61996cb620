// UTF-8 validation and lossy repair with the same subpart rules as Rust's core::str (Unicode Table 3-7).
#include "util/utf8.hpp"

#include <simdjson.h>

namespace actorllm {

bool is_valid_utf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

size_t utf8_sequence_length(std::string_view s, size_t i, size_t* invalid_length) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80)
    return 1;
  size_t need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (c == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else {
    if (invalid_length != nullptr)
      *invalid_length = 1;
    return 0;
  }
  // Only the second byte has a restricted range; the rest are plain continuation bytes.
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size())
      break;
    const unsigned char b = byte(i + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : is_utf8_continuation(b);
    if (!ok)
      break;
  }
  if (k == need + 1)
    return need + 1;
  if (invalid_length != nullptr)
    *invalid_length = k;
  return 0;
}

void append_utf8_lossy(std::string& out, std::string_view s) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending well-formed run, copied in one go
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad = 0;
    const size_t n = utf8_sequence_length(s, i, &bad);
    if (n != 0) {
      i += n;
      continue;
    }
    out.append(s.substr(run_start, i - run_start));
    out.append(replacement_character);
    i += bad;
    run_start = i;
  }
  out.append(s.substr(run_start));
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s))
    return std::string{s};
  std::string out;
  out.reserve(s.size() + 8);
  append_utf8_lossy(out, s);
  return out;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  size_t n = 0;
  char32_t cp = 0;
  if (c < 0xE0) {
    n = 2;
    cp = c & 0x1F;
  } else if (c < 0xF0) {
    n = 3;
    cp = c & 0x0F;
  } else {
    n = 4;
    cp = c & 0x07;
  }
  for (size_t k = 1; k < n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace actorllm
