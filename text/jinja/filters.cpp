// Builtin filters.
#include "text/jinja/filters.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "text/jinja/callable.hpp"
#include "text/jinja/json.hpp"
#include "text/jinja/methods.hpp"
#include "text/jinja/operations.hpp"
#include "text/jinja/pystring.hpp"
#include "text/jinja/render_context.hpp"
#include "text/jinja/tests.hpp"

namespace actorllm::text::jinja {
namespace {

void no_args(std::string_view filter, const call_arguments& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    throw value_error(std::string(filter) + "() takes no arguments");
}

// Jinja's make_attrgetter: "a.b.0" looks up each part with getitem (digits as integers), "" or absent is the
// item itself. Missing parts give `fallback` when one is set.
value lookup_attribute(const value& item, const value& attribute, const value* fallback = nullptr) {
  if (attribute.is_undefined() || attribute.is_none())
    return item;
  if (attribute.is_int())
    return get_item(item, attribute);
  std::string path = to_string(attribute);
  value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.size() < 18 &&
                  std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = digits ? get_item(current, value(std::stoll(part))) : get_item(current, value(part));
    if (current.is_undefined() && fallback != nullptr)
      return *fallback;
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return current;
}

std::string to_text(const value& v) { return to_string(v); }

// Sort/unique/min/max key: the attribute, lower-cased for strings unless case_sensitive.
value sort_key(const value& item, const value& attribute, bool case_sensitive) {
  value key = lookup_attribute(item, attribute);
  if (!case_sensitive && key.is_string())
    return value(pystr::lower(key.as_string()));
  return key;
}

value f_abs(render_context&, const value& v, call_arguments& args) {
  no_args("abs", args);
  if (v.is_int()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min())
      throw value_error("integer overflow in abs()");
    return value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_bool())
    return value(v.as_bool() ? 1 : 0);
  if (v.is_float())
    return value(std::fabs(v.as_double()));
  if (v.is_undefined())
    fail_undefined(v);
  throw value_error("bad operand type for abs(): '" + std::string(v.type_name()) + "'");
}

// attr() looks up an attribute only, never a dict key (Jinja's environment.getattr without the item fallback).
value f_attr(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("attr", args, {"name"}, 1);
  std::string name = to_text(a[0]);
  if (v.is_dict())
    return has_method(v, name) ? bind_method(v, name)
                               : value::undefined("'dict object' has no attribute '" + name + "'");
  return get_attribute(v, name);
}

value f_batch(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("batch", args, {"linecount", "fill_with"}, 1);
  int64_t size = a.get_int(0, 1);
  if (size <= 0)
    throw value_error("batch(): linecount must be positive");
  std::vector<value> batches;
  std::vector<value> current;
  for (auto& item : iterate(v, ctx)) {
    current.push_back(std::move(item));
    if (static_cast<int64_t>(current.size()) == size)
      batches.push_back(value::list(std::exchange(current, {})));
  }
  if (!current.empty()) {
    if (a.has(1) && !a[1].is_none())
      while (static_cast<int64_t>(current.size()) < size)
        current.push_back(a[1]);
    batches.push_back(value::list(std::move(current)));
  }
  return value::list(std::move(batches));
}

value f_capitalize(render_context&, const value& v, call_arguments& args) {
  no_args("capitalize", args);
  return value(pystr::capitalize(to_text(v)));
}

value f_center(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("center", args, {"width"});
  int64_t width = a.get_int(0, 80);
  std::string s = to_text(v);
  auto n = static_cast<int64_t>(pystr::length(s));
  if (width <= n)
    return value(s);
  ctx.check_string_size(static_cast<size_t>(width) + s.size());
  auto total = static_cast<size_t>(width - n);
  size_t left = total / 2 + (total & static_cast<size_t>(width) & 1);
  return value(std::string(left, ' ') + s + std::string(total - left, ' '));
}

value f_length(render_context&, const value& v, call_arguments& args) {
  no_args("length", args);
  if (v.is_namespace())
    throw value_error("object of type 'Namespace' has no len()");
  return value(length_of(v));
}

value f_default(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a[1].truthy() && !v.truthy()))
    return a.get(0, value(""));
  return v;
}

value f_dictsort(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict())
    throw value_error("dictsort: argument must be a dict, not " + std::string(v.type_name()));
  bool case_sensitive = a[0].truthy();
  std::string by = a.get_string(1).value_or("key");
  if (by != "key" && by != "value")
    throw value_error("dictsort: 'by' must be 'key' or 'value'");
  bool reverse = a[2].truthy();
  ctx.charge(v.as_dict().size());
  std::vector<std::pair<value, value>> entries = v.as_dict().entries();
  auto key = [&](const std::pair<value, value>& e) {
    return sort_key(by == "key" ? e.first : e.second, value(), case_sensitive);
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  std::vector<value> out;
  for (auto& [k, item] : entries)
    out.push_back(value::tuple({k, item}));
  return value::list(std::move(out));
}

value f_escape(render_context&, const value& v, call_arguments& args) {
  no_args("escape", args);
  std::string out;
  for (char c : to_text(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return value(std::move(out));
}

value f_first(render_context& ctx, const value& v, call_arguments& args) {
  no_args("first", args);
  if (v.is_list())
    return v.as_list().items.empty() ? value::undefined("No first item, sequence was empty.")
                                     : v.as_list().items.front();
  auto items = iterate(v, ctx);
  return items.empty() ? value::undefined("No first item, sequence was empty.") : items.front();
}

value f_last(render_context& ctx, const value& v, call_arguments& args) {
  no_args("last", args);
  if (v.is_list())
    return v.as_list().items.empty() ? value::undefined("No last item, sequence was empty.") : v.as_list().items.back();
  auto items = iterate(v, ctx);
  return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

// Python's float() of a string: surrounding whitespace allowed, underscores between digits, inf/nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s(pystr::strip(text, std::nullopt, true, true));
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    cleaned.push_back(s[i]);
  }
  if (cleaned.empty() || cleaned.find_first_of("xXpP") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size())
    return std::nullopt;
  return d;
}

std::optional<int64_t> parse_int(const std::string& text, int64_t base) {
  std::string s(pystr::strip(text, std::nullopt, true, true));
  bool negative = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-'))
    negative = s[i++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < s.size() && s[i] == '0') {
      char p = static_cast<char>(s[i + 1] | 0x20);
      int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed != 0 && (base == 0 || base == prefixed)) {
        base = prefixed;
        i += 2;
      }
    }
    if (base == 0)
      base = 10;
  }
  if (base < 2 || base > 36)
    throw value_error("int() base must be >= 2 and <= 36, or 0");
  if (i >= s.size())
    return std::nullopt;
  uint64_t magnitude = 0;
  bool any = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && any && i + 1 < s.size())
      continue;
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base)
      return std::nullopt;
    if (magnitude > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - static_cast<uint64_t>(d)) /
                        static_cast<uint64_t>(base))
      throw value_error("integer too large");
    magnitude = magnitude * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    any = true;
  }
  auto result = static_cast<int64_t>(magnitude);
  return negative ? -result : result;
}

std::optional<int64_t> float_to_int(double d) {
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
    return std::nullopt;
  return static_cast<int64_t>(d);
}

value f_int(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("int", args, {"default", "base"});
  value fallback = a.get(0, value(0));
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_int())
    return v;
  if (v.is_bool())
    return value(v.as_bool() ? 1 : 0);
  if (v.is_float()) {
    auto i = float_to_int(v.as_double());
    return i ? value(*i) : fallback;
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), a.get_int(1, 10)))
      return value(*i);
    if (auto d = parse_float(v.as_string()))
      if (auto i = float_to_int(*d))
        return value(*i);
  }
  return fallback;
}

value f_float(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("float", args, {"default"});
  value fallback = a.get(0, value(0.0));
  if (v.is_undefined())
    fail_undefined(v);
  if (v.is_float())
    return v;
  if (v.is_int() || v.is_bool())
    return value(v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : static_cast<double>(v.as_int()));
  if (v.is_string())
    if (auto d = parse_float(v.as_string()))
      return value(*d);
  return fallback;
}

value f_format(render_context& ctx, const value& v, call_arguments& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    throw value_error("format: can't handle positional and keyword arguments at the same time");
  if (!args.keyword.empty()) {
    value mapping = value::dict();
    for (auto& [key, item] : args.keyword)
      mapping.mutable_dict().set(value(key), item);
    return value(percent_format(to_text(v), mapping, ctx));
  }
  return value(percent_format(to_text(v), value::tuple(args.positional), ctx));
}

value f_groupby(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("groupby", args, {"attribute", "default", "case_sensitive"}, 1);
  bool case_sensitive = a[2].truthy();
  const value* fallback = a.has(1) ? &a[1] : nullptr;
  auto items = iterate(v, ctx);
  auto key = [&](const value& item) {
    value k = lookup_attribute(item, a[0], fallback);
    return (!case_sensitive && k.is_string()) ? value(pystr::lower(k.as_string())) : k;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const value& x, const value& y) { return compare(key(x), key(y)) < 0; });
  std::vector<value> groups;
  for (size_t i = 0; i < items.size();) {
    value k = key(items[i]);
    value grouper = lookup_attribute(items[i], a[0], fallback);
    std::vector<value> members;
    while (i < items.size() && equals(key(items[i]), k))
      members.push_back(items[i++]);
    groups.push_back(value::tuple({grouper, value::list(std::move(members))}));
  }
  return value::list(std::move(groups));
}

value f_indent(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("indent", args, {"width", "first", "blank"});
  std::string indention;
  if (a.has(0) && a[0].is_string()) {
    indention = a[0].as_string();
  } else {
    int64_t width = a.get_int(0, 4);
    ctx.check_string_size(static_cast<size_t>(std::clamp<int64_t>(width, 0, std::numeric_limits<int32_t>::max())));
    indention.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  if (v.is_undefined())
    fail_undefined(v);
  if (!v.is_string())
    throw value_error("unsupported operand type(s) for +=: '" + std::string(v.type_name()) + "' and 'str'");
  std::string s = v.as_string() + "\n";  // Jinja's quirk: the added newline keeps a trailing empty line
  auto lines = pystr::splitlines(s, false, ctx.limits.max_items);
  ctx.check_string_size(s.size() + lines.size() * indention.size());
  std::string out;
  if (a[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0)
        out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty())
        out += indention;
      out += lines[i];
    }
  }
  if (a[1].truthy())
    out = indention + out;
  return value(std::move(out));
}

value f_items(render_context& ctx, const value& v, call_arguments& args) {
  no_args("items", args);
  if (v.is_undefined())
    return value::list();
  if (!v.is_dict())
    throw value_error("Can only get item pairs from a mapping.");
  ctx.charge(v.as_dict().size());
  std::vector<value> out;
  for (const auto& [key, item] : v.as_dict().entries())
    out.push_back(value::tuple({key, item}));
  return value::list(std::move(out));
}

value f_join(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("join", args, {"d", "attribute"});
  std::string separator = a.has(0) ? to_text(a[0]) : "";
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v, ctx)) {
    if (!first)
      out += separator;
    first = false;
    append_string(out, a.has(1) ? lookup_attribute(item, a[1]) : item);
    ctx.check_string_size(out.size());
  }
  return value(std::move(out));
}

value f_list(render_context& ctx, const value& v, call_arguments& args) {
  no_args("list", args);
  return value::list(iterate(v, ctx));
}

value f_lower(render_context&, const value& v, call_arguments& args) {
  no_args("lower", args);
  return value(pystr::lower(to_text(v)));
}

value f_upper(render_context&, const value& v, call_arguments& args) {
  no_args("upper", args);
  return value(pystr::upper(to_text(v)));
}

// Jinja's title filter: upper case at the start and after '-', whitespace and opening brackets, lower elsewhere.
value f_title(render_context&, const value& v, call_arguments& args) {
  no_args("title", args);
  std::string s = to_text(v);
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = pystr::next_char(s, i);
    std::string piece = s.substr(start, i - start);
    out += word_start ? pystr::upper(piece) : pystr::lower(piece);
    word_start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || pystr::is_space(c);
  }
  return value(std::move(out));
}

value f_trim(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("trim", args, {"chars"});
  auto chars = a.get_string(0);
  std::string s = to_text(v);
  return value(pystr::strip(s, chars ? std::optional<std::string_view>(*chars) : std::nullopt, true, true));
}

value f_string(render_context&, const value& v, call_arguments& args) {
  no_args("string", args);
  return value(to_text(v));
}

value f_safe(render_context&, const value& v, call_arguments& args) {
  no_args("safe", args);
  return v;
}

value f_replace(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("replace", args, {"old", "new", "count"}, 2);
  int64_t count = a[2].is_none() ? -1 : a.get_int(2, -1);
  return value(pystr::replace(to_text(v), to_text(a[0]), to_text(a[1]), count, ctx.limits.max_string_bytes));
}

value f_reverse(render_context& ctx, const value& v, call_arguments& args) {
  no_args("reverse", args);
  if (v.is_string()) {
    const std::string& s = v.as_string();
    auto offsets = pystr::char_offsets(s);
    std::string out;
    out.reserve(s.size());
    for (size_t i = offsets.size() - 1; i > 0; --i)
      out.append(s, offsets[i - 1], offsets[i] - offsets[i - 1]);
    return value(std::move(out));
  }
  auto items = iterate(v, ctx);
  std::reverse(items.begin(), items.end());
  return value::list(std::move(items));
}

value f_round(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("round", args, {"precision", "method"});
  int64_t precision = a.get_int(0, 0);
  std::string method = a.get_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw value_error("method must be common, ceil or floor");
  if (v.is_int() || v.is_bool()) {
    if (method == "common")
      return value(v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int());
  } else if (!v.is_float()) {
    if (v.is_undefined())
      fail_undefined(v);
    throw value_error("round: argument must be a number, not " + std::string(v.type_name()));
  }
  double x = v.is_float() ? v.as_double() : static_cast<double>(v.is_bool() ? v.as_bool() : v.as_int());
  if (!std::isfinite(x))
    return value(x);
  precision = std::clamp<int64_t>(precision, -308, 308);
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = x * scale;
  double rounded = method == "ceil"    ? std::ceil(scaled)
                   : method == "floor" ? std::floor(scaled)
                                       : std::nearbyint(scaled);
  // Python's round() rounds half to even, which nearbyint does in the default rounding mode.
  return value(std::isfinite(scaled) ? rounded / scale : x);
}

// select / reject / selectattr / rejectattr.
value select_items(render_context& ctx, const value& v, call_arguments& args, bool keep_if, bool by_attribute,
                   std::string_view name) {
  size_t offset = 0;
  value attribute;
  if (by_attribute) {
    if (args.positional.empty())
      throw value_error(std::string(name) + ": missing the attribute argument");
    attribute = args.positional[0];
    offset = 1;
  }
  test_function test = nullptr;
  if (args.positional.size() > offset) {
    if (!args.positional[offset].is_string())
      throw value_error(std::string(name) + ": the test name must be a string");
    test = find_test(args.positional[offset].as_string());
    if (test == nullptr)
      throw value_error("no test named '" + args.positional[offset].as_string() + "'");
    ++offset;
  }
  call_arguments test_args;
  test_args.positional.assign(
      args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(offset, args.positional.size())),
      args.positional.end());
  test_args.keyword = args.keyword;
  std::vector<value> out;
  for (auto& item : iterate(v, ctx)) {
    value subject = by_attribute ? lookup_attribute(item, attribute) : item;
    bool passed;
    if (test != nullptr) {
      call_arguments copy = test_args;
      passed = test(ctx, subject, copy);
    } else {
      passed = subject.truthy();
    }
    if (passed == keep_if)
      out.push_back(std::move(item));
  }
  return value::list(std::move(out));
}

value f_select(render_context& ctx, const value& v, call_arguments& args) {
  return select_items(ctx, v, args, true, false, "select");
}
value f_reject(render_context& ctx, const value& v, call_arguments& args) {
  return select_items(ctx, v, args, false, false, "reject");
}
value f_selectattr(render_context& ctx, const value& v, call_arguments& args) {
  return select_items(ctx, v, args, true, true, "selectattr");
}
value f_rejectattr(render_context& ctx, const value& v, call_arguments& args) {
  return select_items(ctx, v, args, false, true, "rejectattr");
}

value f_map(render_context& ctx, const value& v, call_arguments& args) {
  std::vector<value> out;
  if (args.positional.empty()) {
    bound_arguments a("map", args, {"attribute", "default"}, 1);
    const value* fallback = a.has(1) ? &a[1] : nullptr;
    for (const auto& item : iterate(v, ctx))
      out.push_back(lookup_attribute(item, a[0], fallback));
    return value::list(std::move(out));
  }
  if (!args.positional[0].is_string())
    throw value_error("map: the filter name must be a string");
  std::string name = args.positional[0].as_string();
  filter_function filter = find_filter(name);
  if (filter == nullptr)
    throw value_error("no filter named '" + name + "'");
  call_arguments filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const auto& item : iterate(v, ctx)) {
    call_arguments copy = filter_args;
    out.push_back(filter(ctx, item, copy));
  }
  return value::list(std::move(out));
}

value min_max(render_context& ctx, const value& v, call_arguments& args, bool want_max, std::string_view name) {
  bound_arguments a(std::string(name), args, {"case_sensitive", "attribute"});
  bool case_sensitive = a[0].truthy();
  auto items = iterate(v, ctx);
  if (items.empty())
    return value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  value best_key = sort_key(items[0], a[1], case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    value key = sort_key(items[i], a[1], case_sensitive);
    int c = compare(key, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

value f_max(render_context& ctx, const value& v, call_arguments& args) { return min_max(ctx, v, args, true, "max"); }
value f_min(render_context& ctx, const value& v, call_arguments& args) { return min_max(ctx, v, args, false, "min"); }

value f_sort(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a[0].truthy();
  bool case_sensitive = a[1].truthy();
  auto items = iterate(v, ctx);
  std::vector<std::pair<value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    keyed.emplace_back(sort_key(items[i], a[2], case_sensitive), i);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<value> out;
  out.reserve(items.size());
  for (const auto& [key, i] : keyed)
    out.push_back(items[i]);
  return value::list(std::move(out));
}

value f_sum(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("sum", args, {"attribute", "start"});
  value total = a.get(1, value(0));
  for (const auto& item : iterate(v, ctx))
    total = apply_binary(binary_op::add, total, a.has(0) ? lookup_attribute(item, a[0]) : item, ctx);
  return total;
}

value f_unique(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a[0].truthy();
  std::vector<value> seen;
  std::vector<value> out;
  for (auto& item : iterate(v, ctx)) {
    value key = sort_key(item, a[1], case_sensitive);
    bool duplicate = false;
    for (const auto& s : seen) {
      ctx.charge();
      if (equals(s, key)) {
        duplicate = true;
        break;
      }
    }
    if (!duplicate) {
      seen.push_back(std::move(key));
      out.push_back(std::move(item));
    }
  }
  return value::list(std::move(out));
}

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
value f_tojson(render_context& ctx, const value& v, call_arguments& args) {
  bound_arguments a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  json_dump_options options;
  options.ensure_ascii = a[0].truthy();
  if (a.has(1) && !a[1].is_none()) {
    if (a[1].is_string()) {
      options.indent = a[1].as_string();
    } else {
      int64_t width = a.get_int(1, 0);
      if (width > 1000)
        throw value_error("tojson: indent too large");
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    }
  }
  if (a.has(2) && !a[2].is_none()) {
    const value& separators = a[2];
    if (!separators.is_list() || separators.as_list().items.size() != 2 || !separators.as_list().items[0].is_string() ||
        !separators.as_list().items[1].is_string())
      throw value_error("tojson: separators must be a pair of strings");
    options.item_separator = separators.as_list().items[0].as_string();
    options.key_separator = separators.as_list().items[1].as_string();
  }
  options.sort_keys = a[3].truthy();
  std::string out = to_json(v, options);
  ctx.charge(out.size() / 16);
  ctx.check_string_size(out.size());
  return value(std::move(out));
}

value f_truncate(render_context&, const value& v, call_arguments& args) {
  bound_arguments a("truncate", args, {"length", "killwords", "end", "leeway"});
  std::string s = to_text(v);
  int64_t length = a.get_int(0, 255);
  bool killwords = a[1].truthy();
  std::string end = a.get_string(2).value_or("...");
  int64_t leeway = a.has(3) && !a[3].is_none() ? a.get_int(3, 5) : 5;
  auto end_length = static_cast<int64_t>(pystr::length(end));
  if (length < end_length)
    throw value_error("expected length >= " + std::to_string(end_length) + ", got " + std::to_string(length));
  if (leeway < 0)
    throw value_error("expected leeway >= 0, got " + std::to_string(leeway));
  auto offsets = pystr::char_offsets(s);
  auto n = static_cast<int64_t>(offsets.size()) - 1;
  if (n <= length + leeway)
    return value(s);
  std::string head = s.substr(0, offsets[static_cast<size_t>(length - end_length)]);
  if (!killwords) {
    size_t space = head.rfind(' ');
    if (space != std::string::npos)
      head.resize(space);
  }
  return value(head + end);
}

value f_wordcount(render_context&, const value& v, call_arguments& args) {
  no_args("wordcount", args);
  std::string s = to_text(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = pystr::next_char(s, i);
    bool word_char = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !pystr::is_space(c));
    if (word_char && !in_word)
      ++words;
    in_word = word_char;
  }
  return value(words);
}

struct named_filter {
  std::string_view name;
  filter_function fn;
};

constexpr std::array<named_filter, 44> filters = {{
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
}};

}  // namespace

filter_function find_filter(std::string_view name) {
  if (name == "wordcount")
    return f_wordcount;
  auto it = std::find_if(filters.begin(), filters.end(), [&](const named_filter& f) { return f.name == name; });
  return it == filters.end() ? nullptr : it->fn;
}

}  // namespace actorllm::text::jinja
