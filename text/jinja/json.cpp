// JSON <-> value, with json.dumps' exact output format.
#include "text/jinja/json.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "text/jinja/error.hpp"
#include "text/jinja/pystring.hpp"
#include "text/jinja/render_context.hpp"
#include "util/json_writer.hpp"

namespace actorllm::text::jinja {
namespace {

constexpr int max_json_depth = 256;

void append_json_escaped(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    auto byte = static_cast<unsigned char>(s[i]);
    if (byte < 0x80) {
      ++i;
      append_json_escaped_ascii(out, byte);
      continue;
    }
    size_t start = i;
    char32_t c = pystr::next_char(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (i - start == 1) {
      out += "\\ufffd";  // a byte that is not UTF-8
    } else if (c >= 0x10000) {
      char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d))
    return "NaN";
  if (std::isinf(d))
    return d < 0 ? "-Infinity" : "Infinity";
  return pystr::format_float(d);
}

// json.dumps turns non-string keys into strings this way.
std::string json_key(const value& key) {
  switch (key.kind()) {
    case value_kind::string:
      return key.as_string();
    case value_kind::integer:
      return std::to_string(key.as_int());
    case value_kind::floating:
      return json_float(key.as_double());
    case value_kind::boolean:
      return key.as_bool() ? "true" : "false";
    case value_kind::none:
      return "null";
    default:
      throw value_error("keys must be str, int, float, bool or None, not " + std::string(key.type_name()));
  }
}

bool key_less(const value& a, const value& b) {
  if (a.is_string() && b.is_string())
    return a.as_string() < b.as_string();
  auto numeric = [](const value& v) { return v.is_int() || v.is_float() || v.is_bool(); };
  auto number = [](const value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); };
  if (numeric(a) && numeric(b))
    return number(a) < number(b);
  throw value_error("'<' not supported between instances of '" + std::string(a.type_name()) + "' and '" +
                    std::string(b.type_name()) + "'");
}

class json_writer {
 public:
  explicit json_writer(const json_dump_options& options)
      : options_(options),
        item_separator_(options.item_separator.value_or(options.indent ? "," : ", ")),
        key_separator_(options.key_separator.value_or(": ")) {}

  void write(const value& v, int level) {
    if (level > max_json_depth)
      throw value_error("value nested too deeply for tojson");
    charge_current_render(1);
    check_current_string_size(out_.size());
    switch (v.kind()) {
      case value_kind::none:
        out_ += "null";
        return;
      case value_kind::boolean:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case value_kind::integer:
        out_ += std::to_string(v.as_int());
        return;
      case value_kind::floating:
        out_ += json_float(v.as_double());
        return;
      case value_kind::string:
        append_json_escaped(out_, v.as_string(), options_.ensure_ascii);
        return;
      case value_kind::list:
        write_list(v.as_list(), level);
        return;
      case value_kind::dict:
        write_dict(v.as_dict(), level);
        return;
      default:
        throw value_error("Object of type " + std::string(v.type_name()) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    out_.push_back('\n');
    for (int i = 0; i < level; ++i)
      out_ += *options_.indent;
  }

  void write_list(const list_data& list, int level) {
    if (list.items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    if (options_.indent)
      newline(level + 1);
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) {
        out_ += item_separator_;
        if (options_.indent)
          newline(level + 1);
      }
      write(list.items[i], level + 1);
    }
    if (options_.indent)
      newline(level);
    out_.push_back(']');
  }

  void write_dict(const dict_data& dict, int level) {
    if (dict.size() == 0) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<value, value>*> entries;
    entries.reserve(dict.size());
    for (const auto& entry : dict.entries())
      entries.push_back(&entry);
    if (options_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return key_less(a->first, b->first); });
    out_.push_back('{');
    if (options_.indent)
      newline(level + 1);
    bool first = true;
    for (const auto* entry : entries) {
      if (!first) {
        out_ += item_separator_;
        if (options_.indent)
          newline(level + 1);
      }
      first = false;
      append_json_escaped(out_, json_key(entry->first), options_.ensure_ascii);
      out_ += key_separator_;
      write(entry->second, level + 1);
    }
    if (options_.indent)
      newline(level);
    out_.push_back('}');
  }

  const json_dump_options& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

std::string to_json(const value& v, const json_dump_options& options) {
  json_writer writer(options);
  writer.write(v, 0);
  return writer.take();
}

value from_json(const simdjson::dom::element& element) {
  using simdjson::dom::element_type;
  switch (element.type()) {
    case element_type::ARRAY: {
      simdjson::dom::array array;
      if (element.get_array().get(array))
        return value::list();
      std::vector<value> items;
      for (simdjson::dom::element item : array)
        items.push_back(from_json(item));
      return value::list(std::move(items));
    }
    case element_type::OBJECT: {
      simdjson::dom::object object;
      value dict = value::dict();
      if (element.get_object().get(object))
        return dict;
      auto& data = dict.mutable_dict();
      for (simdjson::dom::key_value_pair field : object)
        data.set(value(field.key), from_json(field.value));
      return dict;
    }
    case element_type::INT64:
      return value(element.get_int64().value_unsafe());
    case element_type::UINT64:
      return value(static_cast<double>(element.get_uint64().value_unsafe()));
    case element_type::DOUBLE:
      return value(element.get_double().value_unsafe());
    case element_type::STRING:
      return value(element.get_string().value_unsafe());
    case element_type::BOOL:
      return value(element.get_bool().value_unsafe());
    case element_type::NULL_VALUE:
      return value::none();
  }
  return value::none();
}

value parse_json(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  auto error = parser.parse(padded).get(root);
  if (error)
    throw std::invalid_argument(std::string("invalid JSON: ") + simdjson::error_message(error));
  return from_json(root);
}

}  // namespace actorllm::text::jinja
