// GPT-2's byte-to-unicode table: byte-level BPE vocabularies (Llama 3, Qwen) spell every byte as a printable
// character so that tokens are valid strings. Used by the ByteLevel pre-tokenizer and decoder.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace actorllm::text {

/// The byte <-> character mapping of bytes_to_unicode() in GPT-2's encoder.py.
class byte_level_alphabet {
 public:
  /// The process-wide table (built once, immutable).
  static const byte_level_alphabet& get();

  /// UTF-8 spelling of the character that stands for byte `b` (1 or 2 bytes long).
  std::string_view char_for(uint8_t b) const { return {spelled_[b].data(), length_[b]}; }

  /// Appends the byte-level spelling of every byte of `bytes` to `out`.
  void encode(std::string_view bytes, std::string& out) const;

  /// The byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
  int byte_for(char32_t cp) const { return cp < reverse_.size() ? reverse_[cp] : -1; }

  /// Maps a token spelled in the alphabet back to raw bytes. Returns false (leaving `out` unspecified beyond its
  /// original size) when some character is not in the alphabet.
  bool decode(std::string_view token, std::string& out) const;

 private:
  byte_level_alphabet();
  std::array<std::array<char, 2>, 256> spelled_{};
  std::array<uint8_t, 256> length_{};
  std::array<int16_t, 324> reverse_{};
};

}  // namespace actorllm::text
