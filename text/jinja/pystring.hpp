// Python `str` semantics over UTF-8 bytes. Chat templates are written against Python strings (indices count code
// points, strip() knows Unicode whitespace, repr() picks its quote), so the engine needs the same answers from
// std::string. Bytes that are not valid UTF-8 count as one character each, so nothing here can fail on bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text::jinja::pystr {

/// Decodes the character at s[i] and advances i past it. An invalid byte decodes as itself (0x80..0xFF).
char32_t next_char(std::string_view s, size_t& i);

/// Appends the UTF-8 encoding of `c` (invalid code points are written as U+FFFD).
void append_utf8(std::string& out, char32_t c);

/// True when every byte is ASCII (then byte offsets are character offsets).
bool is_ascii(std::string_view s);

/// Number of characters (code points).
size_t length(std::string_view s);

/// Byte offset of every character start, plus s.size() at the end (size length(s) + 1).
std::vector<size_t> char_offsets(std::string_view s);

/// Python's str.isspace() for one character.
bool is_space(char32_t c);

/// str.strip / lstrip / rstrip: `chars` is the set of characters to remove (whitespace when absent).
std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right);

/// str.split(sep, maxsplit) and str.rsplit; sep absent splits on whitespace runs. maxsplit < 0: no limit.
/// Throws value_error for an empty separator, and value_error(limit) past `max_parts` parts.
std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                               size_t max_parts = std::numeric_limits<size_t>::max());
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string_view>& sep, int64_t maxsplit,
                                size_t max_parts = std::numeric_limits<size_t>::max());

/// str.splitlines(keepends) with Python's set of line boundaries; value_error(limit) past `max_parts` lines.
std::vector<std::string> splitlines(std::string_view s, bool keepends,
                                    size_t max_parts = std::numeric_limits<size_t>::max());

/// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other characters are unchanged.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
/// str.capitalize(): first character upper case, the rest lower case.
std::string capitalize(std::string_view s);
/// str.title(): upper case after every uncased character, lower case elsewhere.
std::string title(std::string_view s);

/// str.replace(old, new, count); count < 0 replaces all. Throws value_error when the result would pass max_bytes.
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count,
                    size_t max_bytes);

/// Python repr() of a str: quoted with ' (or " when that avoids escaping), control characters escaped.
std::string repr(std::string_view s);

/// Python repr() of a float: the shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double x);

/// str.isdigit / isalpha / isalnum / isspace / islower / isupper (ASCII classification beyond whitespace).
bool is_digit_string(std::string_view s);
bool is_alpha_string(std::string_view s);
bool is_alnum_string(std::string_view s);
bool is_space_string(std::string_view s);
bool is_lower_string(std::string_view s);
bool is_upper_string(std::string_view s);

}  // namespace actorllm::text::jinja::pystr
