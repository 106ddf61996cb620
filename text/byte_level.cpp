// bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
#include "text/byte_level.hpp"

#include "util/utf8.hpp"

namespace actorllm::text {

byte_level_alphabet::byte_level_alphabet() {
  reverse_.fill(-1);
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
    std::string s;
    append_code_point(s, cp);
    length_[b] = static_cast<uint8_t>(s.size());
    for (size_t k = 0; k < s.size(); ++k)
      spelled_[b][k] = s[k];
    reverse_[cp] = static_cast<int16_t>(b);
  }
}

const byte_level_alphabet& byte_level_alphabet::get() {
  static const byte_level_alphabet instance;
  return instance;
}

void byte_level_alphabet::encode(std::string_view bytes, std::string& out) const {
  // Write into spare capacity (at most two bytes per input byte) instead of growing the string per byte.
  const size_t start = out.size();
  out.resize(start + 2 * bytes.size());
  char* p = out.data() + start;
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    p[0] = spelled_[b][0];
    p[1] = spelled_[b][1];
    p += length_[b];
  }
  out.resize(static_cast<size_t>(p - out.data()));
}

bool byte_level_alphabet::decode(std::string_view token, std::string& out) const {
  size_t i = 0;
  while (i < token.size()) {
    // Tokens come from the vocabulary and may in principle hold any bytes; only well-formed characters can map.
    if (utf8_sequence_length(token, i) == 0)
      return false;
    const int b = byte_for(next_code_point(token, i));
    if (b < 0)
      return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace actorllm::text
