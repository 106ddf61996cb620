// ICU-backed character properties and normalization.
#include "text/unicode.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include "util/check.hpp"

#include <limits>

namespace actorllm::text {
namespace {

bool is_numeric_type(int8_t type) {
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

const icu::Normalizer2& normalizer_for(normalization_form form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case normalization_form::nfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case normalization_form::nfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case normalization_form::nfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case normalization_form::nfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  // ICU's data is linked in; failing here means a broken installation, not bad input.
  ACTORLLM_CHECK(U_SUCCESS(status) && n != nullptr, "ICU normalizer unavailable");
  return *n;
}

}  // namespace

bool is_whitespace(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)) != 0; }

bool is_word_character(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (u_isUAlphabetic(c) != 0 || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) != 0)
    return true;
  const int8_t type = u_charType(c);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK || type == U_ENCLOSING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

bool is_numeric(char32_t cp) { return is_numeric_type(u_charType(static_cast<UChar32>(cp))); }

void normalize_unicode(std::string& s, normalization_form form) {
  bool ascii = true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii)
    return;
  ACTORLLM_CHECK(s.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), "text too long for ICU");
  const icu::Normalizer2& n = normalizer_for(form);
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece{s.data(), static_cast<int32_t>(s.size())};
  if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status))
    return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  icu::StringByteSink<std::string> sink{&out};
  status = U_ZERO_ERROR;
  n.normalizeUTF8(0, piece, sink, nullptr, status);
  // The input is well-formed UTF-8 (encode repairs it first), so ICU has no reason to fail.
  ACTORLLM_CHECK(U_SUCCESS(status), "ICU normalization failed");
  s = std::move(out);
}

}  // namespace actorllm::text
