// A small streaming JSON writer.
#include "util/json_writer.hpp"

#include "util/utf8.hpp"

#include <cmath>
#include <cstdio>

namespace actorllm {

void append_json_escaped_ascii(std::string& out, unsigned char c) {
  switch (c) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\f':
      out += "\\f";
      return;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out.push_back(static_cast<char>(c));
      }
  }
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t invalid = 0;
      size_t n = utf8_sequence_length(s, i, &invalid);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // one U+FFFD per maximal invalid subpart, as util/utf8 repairs everywhere
        i += invalid;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    append_json_escaped_ascii(out, c);
    ++i;
  }
  out.push_back('"');
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back())
      out_.push_back(',');
    first_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  before_value();
  out_.push_back('{');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_object() {
  out_.push_back('}');
  first_.pop_back();
  return *this;
}

json_writer& json_writer::begin_array() {
  before_value();
  out_.push_back('[');
  first_.push_back(true);
  return *this;
}

json_writer& json_writer::end_array() {
  out_.push_back(']');
  first_.pop_back();
  return *this;
}

json_writer& json_writer::key(std::string_view k) {
  before_value();
  append_json_string(out_, k);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  before_value();
  append_json_string(out_, s);
  return *this;
}

json_writer& json_writer::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}

json_writer& json_writer::value(int64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

json_writer& json_writer::value(uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

json_writer& json_writer::value(double v) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  out_ += buf;
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

json_writer& json_writer::raw(std::string_view r) {
  before_value();
  out_.append(r);
  return *this;
}

}  // namespace actorllm
