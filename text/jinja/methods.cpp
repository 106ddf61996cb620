// Python str/list/dict methods for templates.
#include "text/jinja/methods.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "text/jinja/error.hpp"
#include "text/jinja/operations.hpp"
#include "text/jinja/pystring.hpp"

namespace actorllm::text::jinja {
namespace {

constexpr std::array<std::string_view, 35> string_methods = {
    "strip",   "lstrip", "rstrip",     "split",     "rsplit",    "splitlines",   "startswith",   "endswith", "upper",
    "lower",   "title",  "capitalize", "replace",   "find",      "rfind",        "index",        "rindex",   "count",
    "join",    "format", "isdigit",    "isnumeric", "isdecimal", "isalpha",      "isalnum",      "isspace",  "islower",
    "isupper", "ljust",  "rjust",      "center",    "zfill",     "removeprefix", "removesuffix", "swapcase"};
constexpr std::array<std::string_view, 11> list_methods = {"append", "extend", "insert",  "pop",  "remove", "index",
                                                           "count",  "copy",   "reverse", "sort", "clear"};
constexpr std::array<std::string_view, 9> dict_methods = {"get",        "items",  "keys", "values", "pop",
                                                          "setdefault", "update", "copy", "clear"};

template <size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class bound_method final : public callable {
 public:
  bound_method(value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string_view name() const noexcept override { return name_; }
  value call(render_context& ctx, call_arguments& args) const override { return call_method(ctx, self_, name_, args); }

 private:
  value self_;
  std::string name_;
};

void expect_no_args(const std::string& fn, const call_arguments& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    throw value_error(fn + "() takes no arguments");
}

std::string qualified(const value& obj, std::string_view name) {
  return std::string(obj.type_name()) + "." + std::string(name);
}

// Character offsets -> byte offsets for the optional start/end arguments of find/startswith/...
std::string_view char_range(std::string_view s, const bound_arguments& a, size_t start_index, size_t end_index,
                            size_t& first_char) {
  first_char = 0;
  if (!a.has(start_index) && !a.has(end_index))
    return s;
  auto offsets = pystr::char_offsets(s);
  auto n = static_cast<int64_t>(offsets.size()) - 1;
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  int64_t start = a[start_index].is_none() ? 0 : clamp(a.get_int(start_index, 0));
  int64_t end = a[end_index].is_none() ? n : clamp(a.get_int(end_index, n));
  if (end < start)
    return s.substr(0, 0);
  first_char = static_cast<size_t>(start);
  return s.substr(offsets[static_cast<size_t>(start)],
                  offsets[static_cast<size_t>(end)] - offsets[static_cast<size_t>(start)]);
}

// The prefixes of startswith/endswith: a str or a tuple of str.
std::vector<std::string> affixes(const value& v, std::string_view method) {
  if (v.is_string())
    return {v.as_string()};
  if (v.is_list()) {
    std::vector<std::string> out;
    for (const auto& item : v.as_list().items) {
      if (!item.is_string())
        throw value_error(std::string(method) + "(): tuple items must be str, not " + std::string(item.type_name()));
      out.push_back(item.as_string());
    }
    return out;
  }
  throw value_error(std::string(method) + "() argument must be str or a tuple of str, not " +
                    std::string(v.type_name()));
}

std::string required_string(const value& v, std::string_view what) {
  if (!v.is_string())
    throw value_error(std::string(what) + " must be str, not " + std::string(v.type_name()));
  return v.as_string();
}

std::optional<std::string> optional_chars(const value& v, std::string_view method) {
  if (v.is_undefined() || v.is_none())
    return std::nullopt;
  return required_string(v, std::string(method) + "() argument");
}

std::string justify(const std::string& s, int64_t width, const std::string& fill, int where) {
  auto n = static_cast<int64_t>(pystr::length(s));
  if (width <= n)
    return s;
  if (pystr::length(fill) != 1)
    throw value_error("the fill character must be exactly one character long");
  auto total = static_cast<size_t>(width - n);
  size_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & static_cast<size_t>(width) & 1);
  std::string out;
  for (size_t i = 0; i < left; ++i)
    out += fill;
  out += s;
  for (size_t i = left; i < total; ++i)
    out += fill;
  return out;
}

// One replacement field of str.format with a format spec: [[fill]align][sign][#][0][width][,][.precision][type].
std::string apply_format_spec(const value& v, std::string_view spec) {
  if (spec.empty())
    return to_string(v);
  size_t i = 0;
  std::string fill = " ";
  char align = '\0';
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t first_len = 0;
  {
    size_t probe = 0;
    pystr::next_char(spec, probe);
    first_len = probe;
  }
  if (first_len < spec.size() && is_align(spec[first_len])) {
    fill = std::string(spec.substr(0, first_len));
    align = spec[first_len];
    i = first_len + 1;
  } else if (is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' '))
    sign = spec[i++];
  bool alternate = false;
  if (i < spec.size() && spec[i] == '#') {
    alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (align == '\0') {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9' && width < 100000)
    width = width * 10 + (spec[i++] - '0');
  int64_t precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9' && precision < 1000)
      precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : '\0';
  if (i != spec.size() || width > 100000 || precision > 200)
    throw value_error("invalid format specifier '" + std::string(spec) + "'");
  std::string body;
  std::string sign_text;
  bool numeric = false;
  if (v.is_string() || (type == 's')) {
    if (!v.is_string())
      throw value_error("unknown format code 's' for object of type '" + std::string(v.type_name()) + "'");
    body = v.as_string();
    if (precision >= 0) {
      auto offsets = pystr::char_offsets(body);
      if (static_cast<size_t>(precision) + 1 < offsets.size())
        body.resize(offsets[static_cast<size_t>(precision)]);
    }
  } else if (v.is_int() || v.is_bool() || v.is_float()) {
    numeric = true;
    bool as_int = !v.is_float() && (type == '\0' || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
                                    type == 'b' || type == 'c');
    char buf[512];
    if (as_int) {
      long long n = v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
      unsigned long long magnitude =
          n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
      if (n < 0)
        sign_text = "-";
      if (type == 'b') {
        body = magnitude == 0 ? "0" : "";
        for (unsigned long long m = magnitude; m > 0; m >>= 1)
          body.insert(body.begin(), static_cast<char>('0' + (m & 1)));
        if (alternate)
          body.insert(0, "0b");
      } else {
        std::snprintf(buf, sizeof buf,
                      type == 'x'   ? "%llx"
                      : type == 'X' ? "%llX"
                      : type == 'o' ? "%llo"
                                    : "%llu",
                      magnitude);
        body = buf;
        if (alternate && (type == 'x' || type == 'X' || type == 'o'))
          body.insert(0, type == 'o' ? "0o" : type == 'x' ? "0x" : "0X");
      }
    } else {
      double d = v.is_float() ? v.as_double() : static_cast<double>(v.is_bool() ? v.as_bool() : v.as_int());
      if (std::signbit(d) && !std::isnan(d)) {
        sign_text = "-";
        d = -d;
      }
      char t = type == '\0' ? 'g' : type;
      if (type == '\0' && precision < 0) {
        body = pystr::format_float(d);
      } else if (t == '%') {
        std::snprintf(buf, sizeof buf, "%.*f%%", static_cast<int>(precision < 0 ? 6 : precision), d * 100);
        body = buf;
      } else if (std::string_view("fFeEgG").find(t) != std::string_view::npos) {
        std::string fmt = std::string("%.*") + t;
        std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<int>(precision < 0 ? 6 : precision), d);
        body = buf;
      } else {
        throw value_error(std::string("unknown format code '") + t + "' for object of type 'float'");
      }
    }
    if (sign_text.empty() && sign != '-')
      sign_text = std::string(1, sign);
  } else {
    body = to_string(v);
  }
  auto n = static_cast<int64_t>(pystr::length(body) + sign_text.size());
  if (width <= n)
    return sign_text + body;
  auto total = static_cast<size_t>(width - n);
  if (align == '\0')
    align = numeric ? '>' : '<';
  std::string padding;
  auto repeat_fill = [&](size_t k) {
    std::string out;
    for (size_t j = 0; j < k; ++j)
      out += fill;
    return out;
  };
  switch (align) {
    case '<':
      return sign_text + body + repeat_fill(total);
    case '>':
      return repeat_fill(total) + sign_text + body;
    case '=':
      return sign_text + repeat_fill(total) + body;
    default:
      return repeat_fill(total / 2) + sign_text + body + repeat_fill(total - total / 2);
  }
}

std::string str_format(render_context& ctx, std::string_view format, call_arguments& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size();) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      throw value_error("single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string_view::npos)
      throw value_error("single '{' encountered in format string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close + 1;
    std::string_view spec;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = '\0';
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size())
        throw value_error("invalid conversion in format string");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    std::string_view head = field.substr(0, name_end);
    value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size())
        throw value_error("Replacement index " + std::to_string(auto_index) +
                          " out of range for positional args tuple");
      v = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = head.size() > 6 ? args.positional.size() : std::stoul(std::string(head));
      if (index >= args.positional.size())
        throw value_error("Replacement index " + std::string(head) + " out of range for positional args tuple");
      v = args.positional[index];
    } else {
      auto it =
          std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == args.keyword.end())
        throw value_error("KeyError: '" + std::string(head) + "'");
      v = it->second;
    }
    // .attr and [key] chains.
    std::string_view rest = name_end == std::string_view::npos ? std::string_view{} : field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t end = std::min(rest.find('.', 1), rest.find('[', 1));
        v = get_attribute(v, rest.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
        rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
      } else {
        size_t end = rest.find(']');
        if (end == std::string_view::npos)
          throw value_error("missing ']' in format string");
        std::string_view key = rest.substr(1, end - 1);
        bool digits = !key.empty() && key.size() < 10 &&
                      std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        v = get_item(v, digits ? value(std::stoll(std::string(key))) : value(key));
        rest = rest.substr(end + 1);
      }
    }
    if (conversion == 'r' || conversion == 'a')
      v = value(to_repr(v));
    else if (conversion == 's')
      v = value(to_string(v));
    else if (conversion != '\0')
      throw value_error(std::string("unknown conversion specifier ") + conversion);
    out += apply_format_spec(v, spec);
    ctx.check_string_size(out.size());
  }
  return out;
}

value string_method(render_context& ctx, const value& obj, std::string_view name, call_arguments& args) {
  const std::string& s = obj.as_string();
  std::string fn = qualified(obj, name);
  static constexpr std::array<std::string_view, 13> no_arg_methods = {
      "upper",     "lower",   "title",   "capitalize", "swapcase", "isdigit", "isnumeric",
      "isdecimal", "isalpha", "isalnum", "isspace",    "islower",  "isupper"};
  if (listed(no_arg_methods, name))
    expect_no_args(fn, args);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bound_arguments a(fn, args, {"chars"});
    auto chars = optional_chars(a[0], name);
    return value(pystr::strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    bound_arguments a(fn, args, {"sep", "maxsplit"});
    auto sep = optional_chars(a[0], name);
    int64_t maxsplit = a.get_int(1, -1);
    auto parts = name == "split" ? pystr::split(s, sep, maxsplit, ctx.limits.max_items)
                                 : pystr::rsplit(s, sep, maxsplit, ctx.limits.max_items);
    ctx.charge(parts.size());
    std::vector<value> items(parts.begin(), parts.end());
    return value::list(std::move(items));
  }
  if (name == "splitlines") {
    bound_arguments a(fn, args, {"keepends"});
    auto lines = pystr::splitlines(s, a[0].truthy(), ctx.limits.max_items);
    std::vector<value> items(lines.begin(), lines.end());
    return value::list(std::move(items));
  }
  if (name == "startswith" || name == "endswith") {
    bound_arguments a(fn, args, {"prefix", "start", "end"}, 1);
    size_t unused = 0;
    std::string_view range = char_range(s, a, 1, 2, unused);
    for (const auto& affix : affixes(a[0], name)) {
      bool hit = name == "startswith"
                     ? range.substr(0, affix.size()) == affix
                     : range.size() >= affix.size() && range.substr(range.size() - affix.size()) == affix;
      if (hit)
        return value(true);
    }
    return value(false);
  }
  if (name == "upper")
    return value(pystr::upper(s));
  if (name == "lower")
    return value(pystr::lower(s));
  if (name == "title")
    return value(pystr::title(s));
  if (name == "capitalize")
    return value(pystr::capitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t start = i;
      pystr::next_char(s, i);
      std::string c = s.substr(start, i - start);
      std::string up = pystr::upper(c);
      out += up != c ? up : pystr::lower(c);
    }
    return value(std::move(out));
  }
  if (name == "replace") {
    bound_arguments a(fn, args, {"old", "new", "count"}, 2);
    return value(pystr::replace(s, required_string(a[0], "replace() argument 1"),
                                required_string(a[1], "replace() argument 2"), a.get_int(2, -1),
                                ctx.limits.max_string_bytes));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    bound_arguments a(fn, args, {"sub", "start", "end"}, 1);
    std::string sub = required_string(a[0], std::string(name) + "() argument");
    size_t first_char = 0;
    std::string_view range = char_range(s, a, 1, 2, first_char);
    if (name == "count") {
      if (sub.empty())
        return value(pystr::length(range) + 1);
      int64_t n = 0;
      for (size_t at = range.find(sub); at != std::string_view::npos; at = range.find(sub, at + sub.size()))
        ++n;
      return value(n);
    }
    size_t at = (name == "find" || name == "index") ? range.find(sub) : range.rfind(sub);
    if (at == std::string_view::npos) {
      if (name == "index" || name == "rindex")
        throw value_error("substring not found");
      return value(-1);
    }
    return value(first_char + pystr::length(range.substr(0, at)));
  }
  if (name == "join") {
    bound_arguments a(fn, args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(a[0], ctx)) {
      if (!item.is_string())
        throw value_error("sequence item: expected str instance, " + std::string(item.type_name()) + " found");
      if (!first)
        out += s;
      first = false;
      out += item.as_string();
      ctx.check_string_size(out.size());
    }
    return value(std::move(out));
  }
  if (name == "format")
    return value(str_format(ctx, s, args));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return value(pystr::is_digit_string(s));
  if (name == "isalpha")
    return value(pystr::is_alpha_string(s));
  if (name == "isalnum")
    return value(pystr::is_alnum_string(s));
  if (name == "isspace")
    return value(pystr::is_space_string(s));
  if (name == "islower")
    return value(pystr::is_lower_string(s));
  if (name == "isupper")
    return value(pystr::is_upper_string(s));
  if (name == "ljust" || name == "rjust" || name == "center") {
    bound_arguments a(fn, args, {"width", "fillchar"}, 1);
    int64_t width = a.get_int(0, 0);
    // Check the width before multiplying it by the fill's bytes, which could overflow.
    ctx.check_string_size(static_cast<size_t>(std::max<int64_t>(width, 0)));
    ctx.check_string_size(static_cast<size_t>(std::max<int64_t>(width, 0)) * 4);
    std::string fill = a.has(1) ? required_string(a[1], std::string(name) + "() fillchar") : " ";
    return value(justify(s, width, fill, name == "ljust" ? -1 : name == "rjust" ? 1 : 0));
  }
  if (name == "zfill") {
    bound_arguments a(fn, args, {"width"}, 1);
    int64_t width = a.get_int(0, 0);
    auto n = static_cast<int64_t>(pystr::length(s));
    if (width <= n)
      return obj;
    ctx.check_string_size(static_cast<size_t>(width));
    bool has_sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    std::string out = has_sign ? s.substr(0, 1) : "";
    out.append(static_cast<size_t>(width - n), '0');
    out += has_sign ? s.substr(1) : s;
    return value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bound_arguments a(fn, args, {"affix"}, 1);
    std::string affix = required_string(a[0], std::string(name) + "() argument");
    if (name == "removeprefix")
      return value(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
    bool ends = s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
    return value(ends ? s.substr(0, s.size() - affix.size()) : s);
  }
  throw value_error("'str' object has no attribute '" + std::string(name) + "'");
}

value list_method(render_context& ctx, const value& obj, std::string_view name, call_arguments& args) {
  std::string fn = qualified(obj, name);
  const auto& items = obj.as_list().items;
  auto mutable_items = [&]() -> std::vector<value>& {
    if (obj.as_list().is_tuple)
      throw value_error("'tuple' object has no attribute '" + std::string(name) + "'");
    return obj.mutable_list().items;
  };
  if (name == "append") {
    bound_arguments a(fn, args, {"object"}, 1);
    auto& target = mutable_items();
    ctx.check_items(target.size() + 1);
    target.push_back(a[0]);
    return value::none();
  }
  if (name == "extend") {
    bound_arguments a(fn, args, {"iterable"}, 1);
    std::vector<value> more = iterate(a[0], ctx);
    auto& target = mutable_items();
    ctx.check_items(target.size() + more.size());
    target.insert(target.end(), more.begin(), more.end());
    return value::none();
  }
  if (name == "insert") {
    bound_arguments a(fn, args, {"index", "object"}, 2);
    auto& target = mutable_items();
    ctx.check_items(target.size() + 1);
    auto n = static_cast<int64_t>(target.size());
    int64_t i = a.get_int(0, 0);
    i = i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n);
    target.insert(target.begin() + i, a[1]);
    return value::none();
  }
  if (name == "pop") {
    bound_arguments a(fn, args, {"index"});
    auto& target = mutable_items();
    if (target.empty())
      throw value_error("pop from empty list");
    auto n = static_cast<int64_t>(target.size());
    int64_t i = a.get_int(0, -1);
    if (i < 0)
      i += n;
    if (i < 0 || i >= n)
      throw value_error("pop index out of range");
    value out = std::move(target[static_cast<size_t>(i)]);
    target.erase(target.begin() + i);
    return out;
  }
  if (name == "remove") {
    bound_arguments a(fn, args, {"value"}, 1);
    auto& target = mutable_items();
    for (auto it = target.begin(); it != target.end(); ++it) {
      if (equals(*it, a[0])) {
        target.erase(it);
        return value::none();
      }
    }
    throw value_error("list.remove(x): x not in list");
  }
  if (name == "index") {
    bound_arguments a(fn, args, {"value"}, 1);
    for (size_t i = 0; i < items.size(); ++i)
      if (equals(items[i], a[0]))
        return value(i);
    throw value_error(to_repr(a[0]) + " is not in list");
  }
  if (name == "count") {
    bound_arguments a(fn, args, {"value"}, 1);
    ctx.charge(items.size());
    return value(std::count_if(items.begin(), items.end(), [&](const value& v) { return equals(v, a[0]); }));
  }
  if (name == "copy") {
    expect_no_args(fn, args);
    ctx.charge(items.size());
    return value::list(items);
  }
  if (name == "reverse") {
    expect_no_args(fn, args);
    auto& target = mutable_items();
    std::reverse(target.begin(), target.end());
    return value::none();
  }
  if (name == "sort") {
    bound_arguments a(fn, args, {"key", "reverse"});
    if (a.has(0) && !a[0].is_none())
      throw value_error("list.sort(): key functions are not supported; use the sort filter");
    auto& target = mutable_items();
    ctx.charge(target.size());
    bool reverse = a[1].truthy();
    std::stable_sort(target.begin(), target.end(), [reverse](const value& x, const value& y) {
      return reverse ? compare(y, x) < 0 : compare(x, y) < 0;
    });
    return value::none();
  }
  if (name == "clear") {
    expect_no_args(fn, args);
    mutable_items().clear();
    return value::none();
  }
  throw value_error("'list' object has no attribute '" + std::string(name) + "'");
}

value dict_method(render_context& ctx, const value& obj, std::string_view name, call_arguments& args) {
  std::string fn = qualified(obj, name);
  const dict_data& data = obj.as_dict();
  if (name == "get") {
    bound_arguments a(fn, args, {"key", "default"}, 1);
    const value* found = data.find(a[0]);
    return found != nullptr ? *found : a.get(1, value::none());
  }
  if (name == "items" || name == "keys" || name == "values") {
    expect_no_args(fn, args);
    ctx.charge(data.size());
    std::vector<value> items;
    items.reserve(data.size());
    for (const auto& [key, item] : data.entries()) {
      if (name == "items")
        items.push_back(value::tuple({key, item}));
      else
        items.push_back(name == "keys" ? key : item);
    }
    return value::list(std::move(items));
  }
  if (name == "copy") {
    expect_no_args(fn, args);
    ctx.charge(data.size());
    value copy = value::dict();
    auto& target = copy.mutable_dict();
    for (const auto& [key, item] : data.entries())
      target.set(key, item);
    return copy;
  }
  auto& target = obj.mutable_dict();
  if (name == "pop") {
    bound_arguments a(fn, args, {"key", "default"}, 1);
    const value* found = target.find(a[0]);
    if (found == nullptr) {
      if (a.has(1))
        return a[1];
      throw value_error("KeyError: " + to_repr(a[0]));
    }
    value out = *found;
    target.erase(a[0]);
    return out;
  }
  if (name == "setdefault") {
    bound_arguments a(fn, args, {"key", "default"}, 1);
    if (const value* found = target.find(a[0]))
      return *found;
    ctx.check_items(target.size() + 1);
    target.set(a[0], a.get(1, value::none()));
    return a.get(1, value::none());
  }
  if (name == "update") {
    if (args.positional.size() > 1)
      throw value_error("update expected at most 1 argument, got " + std::to_string(args.positional.size()));
    if (!args.positional.empty()) {
      const value& other = args.positional[0];
      if (other.is_dict()) {
        std::vector<std::pair<value, value>> entries = other.as_dict().entries();
        for (auto& [key, item] : entries)
          target.set(std::move(key), std::move(item));
      } else {
        for (const auto& pair : iterate(other, ctx)) {
          std::vector<value> kv = iterate(pair, ctx);
          if (kv.size() != 2)
            throw value_error("dictionary update sequence element has length " + std::to_string(kv.size()) +
                              "; 2 is required");
          target.set(kv[0], kv[1]);
        }
      }
    }
    for (auto& [key, item] : args.keyword)
      target.set(value(key), item);
    ctx.check_items(target.size());
    return value::none();
  }
  if (name == "clear") {
    expect_no_args(fn, args);
    target.clear();
    return value::none();
  }
  throw value_error("'dict' object has no attribute '" + std::string(name) + "'");
}

}  // namespace

bool has_method(const value& obj, std::string_view name) {
  switch (obj.kind()) {
    case value_kind::string:
      return listed(string_methods, name);
    case value_kind::list:
      return listed(list_methods, name);
    case value_kind::dict:
      return listed(dict_methods, name);
    default:
      return false;
  }
}

value call_method(render_context& ctx, const value& obj, std::string_view name, call_arguments& args) {
  switch (obj.kind()) {
    case value_kind::string:
      return string_method(ctx, obj, name, args);
    case value_kind::list:
      return list_method(ctx, obj, name, args);
    case value_kind::dict:
      return dict_method(ctx, obj, name, args);
    case value_kind::undefined:
      fail_undefined(obj);
    default:
      throw value_error("'" + std::string(obj.type_name()) + "' object has no attribute '" + std::string(name) + "'");
  }
}

value bind_method(const value& obj, std::string_view name) {
  return value::from_callable(std::make_shared<bound_method>(obj, std::string(name)));
}

}  // namespace actorllm::text::jinja
