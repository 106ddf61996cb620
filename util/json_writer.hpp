// A small streaming JSON writer for CLI output, benchmark results and (later) HTTP responses. Produces compact,
// valid JSON; strings are escaped per RFC 8259 (invalid UTF-8 is replaced by U+FFFD so output is always valid).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm {

/// Appends `s` to `out` as a quoted JSON string.
void append_json_string(std::string& out, std::string_view s);

/// Appends the ASCII byte `c` (below 0x80) as it stands inside a JSON string: the two-character escapes for `"`, `\`
/// and the named controls, `\u00XX` for the other controls, else `c` itself (as Python's json.dumps writes it too).
void append_json_escaped_ascii(std::string& out, unsigned char c);

/// Builds one JSON document. Commas are inserted automatically; keys only inside objects.
class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  /// Writes an object key; the next value call writes its value.
  json_writer& key(std::string_view k);
  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view{s}); }
  json_writer& value(bool b);
  json_writer& value(int64_t v);
  json_writer& value(int v) { return value(static_cast<int64_t>(v)); }
  json_writer& value(uint64_t v);
  /// Non-finite doubles are written as null (JSON has no NaN/Inf).
  json_writer& value(double v);
  json_writer& null();
  /// Writes `raw` as-is (must already be valid JSON).
  json_writer& raw(std::string_view raw);
  template <class T>
  json_writer& array(const std::vector<T>& values) {
    begin_array();
    for (const auto& v : values)
      value(v);
    return end_array();
  }
  /// An array of int32 values (token ids).
  json_writer& array(std::span<const int32_t> values) {
    begin_array();
    for (int32_t v : values)
      value(static_cast<int64_t>(v));
    return end_array();
  }
  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void before_value();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace actorllm
