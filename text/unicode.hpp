// Unicode character properties and normalization forms the tokenizer needs, with the exact meanings Rust's char
// methods have (Hugging Face tokenizers is written in Rust). Backed by ICU (libicu-dev).
#pragma once

#include <string>
#include <string_view>

namespace actorllm::text {

/// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(char32_t cp);

/// The Rust regex crate's `\w` (Alphabetic, M*, Nd, Pc, Join_Control), used by HF for added tokens' single_word.
bool is_word_character(char32_t cp);

/// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t cp);

/// Unicode normalization forms (HF normalizers NFC/NFD/NFKC/NFKD).
enum class normalization_form { nfc, nfd, nfkc, nfkd };

/// Normalizes well-formed UTF-8 `s` in place. ASCII text is returned untouched without a copy.
void normalize_unicode(std::string& s, normalization_form form);

}  // namespace actorllm::text
