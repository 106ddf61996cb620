// UTF-8 helpers (validation, lossy repair, code points) shared by the tokenizer stages and the JSON writer. Invalid
// input is repaired the way Rust's String::from_utf8_lossy does it (one U+FFFD per maximal invalid subpart), because
// that is what the Hugging Face decoders produce and our decode must match theirs byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actorllm {

/// U+FFFD REPLACEMENT CHARACTER in UTF-8.
inline constexpr std::string_view replacement_character = "\xEF\xBF\xBD";

/// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// Length of the well-formed sequence that starts at s[i]; 0 when the bytes there do not form one. In the 0 case
/// `*invalid_length` (if given) receives the length of the maximal invalid subpart (>= 1) that U+FFFD replaces.
size_t utf8_sequence_length(std::string_view s, size_t i, size_t* invalid_length = nullptr);

/// Appends `s` to `out`, replacing every maximal invalid subpart by U+FFFD (Rust's from_utf8_lossy).
void append_utf8_lossy(std::string& out, std::string_view s);

/// `s` made well-formed as by append_utf8_lossy; returns `s` unchanged (one copy) when it already is.
std::string to_valid_utf8(std::string_view s);

/// Decodes the code point of the well-formed sequence at s[i] and advances i past it. Precondition: the
/// sequence at i is well-formed (callers only use it on validated text).
char32_t next_code_point(std::string_view s, size_t& i);

/// Appends the UTF-8 encoding of `cp` (a Unicode scalar value).
void append_code_point(std::string& out, char32_t cp);

/// True for bytes 0x80..0xBF, which can only continue a multi-byte sequence.
inline bool is_utf8_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace actorllm
