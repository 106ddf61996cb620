// Operators and lookups on values, with Python's semantics.
#include "text/jinja/operations.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "text/jinja/callable.hpp"
#include "text/jinja/methods.hpp"
#include "text/jinja/pystring.hpp"

namespace actorllm::text::jinja {
namespace {

constexpr int max_compare_depth = 256;
// Strings built by operators cost one evaluation step per this many bytes.
constexpr size_t bytes_per_step = 16;

bool is_intlike(const value& v) { return v.is_int() || v.is_bool(); }
bool is_numeric(const value& v) { return v.is_int() || v.is_float() || v.is_bool(); }
int64_t to_int(const value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }
double to_double(const value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); }

// Jinja's object_type_repr, used in Undefined messages.
std::string object_description(const value& obj) {
  if (obj.is_none())
    return "'None'";
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) about "literal" + std::string.
  std::string out = "'";
  out += obj.type_name();
  out += " object'";
  return out;
}

value missing_attribute(const value& obj, std::string_view name) {
  return value::undefined(object_description(obj) + " has no attribute '" + std::string(name) + "'");
}

value missing_element(const value& obj, const value& key) {
  return value::undefined(std::string(obj.type_name()) + " object has no element " + to_repr(key));
}

[[noreturn]] void unsupported_operands(std::string_view op, const value& a, const value& b) {
  throw value_error("unsupported operand type(s) for " + std::string(op) + ": '" + std::string(a.type_name()) +
                    "' and '" + std::string(b.type_name()) + "'");
}

// Python's slice index normalization (PySlice_AdjustIndices); returns the selected positions.
std::vector<size_t> slice_positions(size_t length, const value& start_v, const value& stop_v, const value& step_v) {
  auto as_index = [](const value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none())
      return std::nullopt;
    if (!is_intlike(v))
      throw value_error("slice indices must be integers or None");
    return to_int(v);
  };
  auto len = static_cast<int64_t>(length);
  int64_t step = as_index(step_v).value_or(1);
  if (step == 0)
    throw value_error("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index)
      return fallback;
    int64_t i = *index;
    if (i < 0) {
      i = i < -len ? (step < 0 ? -1 : 0) : i + len;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t start = adjust(as_index(start_v), step < 0 ? len - 1 : 0);
  int64_t stop = adjust(as_index(stop_v), step < 0 ? -1 : len);
  std::vector<size_t> positions;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) {
      positions.push_back(static_cast<size_t>(i));
      if (step > len)
        break;
    }
  } else {
    for (int64_t i = start; i > stop; i += step) {
      positions.push_back(static_cast<size_t>(i));
      if (step < -len)
        break;
    }
  }
  return positions;
}

bool equals_at(const value& a, const value& b, int depth) {
  if (depth > max_compare_depth)
    throw value_error("values nested too deeply to compare");
  charge_current_render(1);
  // A container equals itself without a walk, as in Python (which compares identical elements by identity).
  if (a.identity() != nullptr && a.identity() == b.identity() && !a.is_callable())
    return true;
  if (is_numeric(a) && is_numeric(b)) {
    if (is_intlike(a) && is_intlike(b))
      return to_int(a) == to_int(b);
    return static_cast<long double>(a.is_float() ? a.as_double() : to_int(a)) ==
           static_cast<long double>(b.is_float() ? b.as_double() : to_int(b));
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
    case value_kind::undefined:
    case value_kind::none:
      return true;
    case value_kind::string:
      charge_current_render(a.as_string().size() / bytes_per_step);
      return a.as_string() == b.as_string();
    case value_kind::list: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size())
        return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals_at(x.items[i], y.items[i], depth + 1))
          return false;
      return true;
    }
    case value_kind::dict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.size() != y.size())
        return false;
      for (const auto& [key, item] : x.entries()) {
        const value* other = y.find(key);
        if (other == nullptr || !equals_at(item, *other, depth + 1))
          return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare_at(const value& a, const value& b, int depth) {
  if (depth > max_compare_depth)
    throw value_error("values nested too deeply to compare");
  charge_current_render(1);
  if (is_numeric(a) && is_numeric(b)) {
    if (is_intlike(a) && is_intlike(b)) {
      int64_t x = to_int(a);
      int64_t y = to_int(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    long double x = a.is_float() ? a.as_double() : to_int(a);
    long double y = b.is_float() ? b.as_double() : to_int(b);
    bool x_nan = std::isnan(x);
    bool y_nan = std::isnan(y);
    if (x_nan || y_nan)
      return x_nan == y_nan ? 0 : (x_nan ? 1 : -1);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    charge_current_render(std::min(a.as_string().size(), b.as_string().size()) / bytes_per_step);
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals_at(x[i], y[i], depth + 1))
        return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined())
    fail_undefined(a);
  if (b.is_undefined())
    fail_undefined(b);
  throw value_error("'<' not supported between instances of '" + std::string(a.type_name()) + "' and '" +
                    std::string(b.type_name()) + "'");
}

std::string repeat_string(const std::string& s, int64_t count, render_context& ctx) {
  if (count <= 0 || s.empty())
    return {};
  if (static_cast<uint64_t>(count) > ctx.limits.max_string_bytes / s.size())
    ctx.check_string_size(ctx.limits.max_string_bytes + 1);
  size_t total = s.size() * static_cast<size_t>(count);
  ctx.charge(total / bytes_per_step);
  std::string out;
  out.reserve(total);
  for (int64_t i = 0; i < count; ++i)
    out += s;
  return out;
}

value repeat_list(const value& list, int64_t count, render_context& ctx) {
  const auto& data = list.as_list();
  std::vector<value> items;
  if (count > 0 && !data.items.empty()) {
    if (static_cast<uint64_t>(count) > ctx.limits.max_items / data.items.size())
      ctx.check_items(ctx.limits.max_items + 1);
    size_t total = data.items.size() * static_cast<size_t>(count);
    ctx.charge(total);
    items.reserve(total);
    for (int64_t i = 0; i < count; ++i)
      items.insert(items.end(), data.items.begin(), data.items.end());
  }
  return data.is_tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
}

value int_power(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 0)
      throw value_error("0 cannot be raised to a negative power");
    return value(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  int64_t result = 1;
  int64_t b = base;
  while (exponent > 0) {
    if ((exponent & 1) && __builtin_mul_overflow(result, b, &result))
      throw value_error("integer overflow in **");
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(b, b, &b))
      throw value_error("integer overflow in **");
  }
  return value(result);
}

// Python's float divmod (floatobject.c _float_div_mod).
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0)
    throw value_error("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5)
      floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

std::pair<int64_t, int64_t> int_divmod(int64_t x, int64_t y) {
  if (y == 0)
    throw value_error("integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1)
    throw value_error("integer overflow in //");
  int64_t q = x / y;
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    r += y;
    q -= 1;
  }
  return {q, r};
}

value numeric_binary(binary_op op, const value& a, const value& b) {
  if (is_intlike(a) && is_intlike(b)) {
    int64_t x = to_int(a);
    int64_t y = to_int(b);
    int64_t r = 0;
    switch (op) {
      case binary_op::add:
        if (__builtin_add_overflow(x, y, &r))
          throw value_error("integer overflow in +");
        return value(r);
      case binary_op::subtract:
        if (__builtin_sub_overflow(x, y, &r))
          throw value_error("integer overflow in -");
        return value(r);
      case binary_op::multiply:
        if (__builtin_mul_overflow(x, y, &r))
          throw value_error("integer overflow in *");
        return value(r);
      case binary_op::divide:
        if (y == 0)
          throw value_error("division by zero");
        return value(static_cast<double>(x) / static_cast<double>(y));
      case binary_op::floor_divide:
        return value(int_divmod(x, y).first);
      case binary_op::modulo:
        return value(int_divmod(x, y).second);
      case binary_op::power:
        return int_power(x, y);
      default:
        break;
    }
  }
  double x = to_double(a);
  double y = to_double(b);
  switch (op) {
    case binary_op::add:
      return value(x + y);
    case binary_op::subtract:
      return value(x - y);
    case binary_op::multiply:
      return value(x * y);
    case binary_op::divide:
      if (y == 0)
        throw value_error("float division by zero");
      return value(x / y);
    case binary_op::floor_divide:
      return value(float_divmod(x, y).first);
    case binary_op::modulo:
      return value(float_divmod(x, y).second);
    case binary_op::power: {
      if (x == 0 && y < 0)
        throw value_error("0.0 cannot be raised to a negative power");
      double r = std::pow(x, y);
      // Python's float ** raises instead of overflowing to inf (unlike *, which gives inf).
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
        throw value_error("(34, 'Numerical result out of range')");
      return value(r);
    }
    default:
      break;
  }
  throw value_error("bad numeric operator");
}

const char* op_symbol(binary_op op) {
  switch (op) {
    case binary_op::add:
      return "+";
    case binary_op::subtract:
      return "-";
    case binary_op::multiply:
      return "*";
    case binary_op::divide:
      return "/";
    case binary_op::floor_divide:
      return "//";
    case binary_op::modulo:
      return "%";
    case binary_op::power:
      return "**";
    case binary_op::concat:
      return "~";
    case binary_op::logical_and:
      return "and";
    case binary_op::logical_or:
      return "or";
  }
  return "?";
}

// Pads `s` to `width` characters (left-aligned with `left`).
std::string pad(std::string s, int64_t width, bool left, char fill = ' ') {
  auto n = static_cast<int64_t>(pystr::length(s));
  if (width <= n)
    return s;
  std::string padding(static_cast<size_t>(width - n), fill);
  return left ? s + padding : padding + s;
}

}  // namespace

void fail_undefined(const value& v) { throw value_error(v.undefined_hint()); }

value get_attribute(const value& obj, std::string_view name) {
  switch (obj.kind()) {
    case value_kind::undefined:
      fail_undefined(obj);
    case value_kind::string:
    case value_kind::list:
      if (has_method(obj, name))
        return bind_method(obj, name);
      return missing_attribute(obj, name);
    case value_kind::dict:
      // Python attributes (the dict's methods) win over keys, as in Jinja's getattr.
      if (has_method(obj, name))
        return bind_method(obj, name);
      [[fallthrough]];
    case value_kind::namespace_object:
      if (const value* found = obj.as_dict().find(name))
        return *found;
      return missing_attribute(obj, name);
    default:
      return missing_attribute(obj, name);
  }
}

value get_item(const value& obj, const value& key) {
  switch (obj.kind()) {
    case value_kind::undefined:
      fail_undefined(obj);
    case value_kind::list:
    case value_kind::string: {
      if (is_intlike(key)) {
        int64_t i = to_int(key);
        if (obj.is_list()) {
          const auto& items = obj.as_list().items;
          auto n = static_cast<int64_t>(items.size());
          if (i < 0)
            i += n;
          if (i < 0 || i >= n)
            return missing_element(obj, key);
          return items[static_cast<size_t>(i)];
        }
        const std::string& s = obj.as_string();
        charge_current_render(s.size() / bytes_per_step);
        if (pystr::is_ascii(s)) {
          auto n = static_cast<int64_t>(s.size());
          if (i < 0)
            i += n;
          if (i < 0 || i >= n)
            return missing_element(obj, key);
          return value(s.substr(static_cast<size_t>(i), 1));
        }
        auto offsets = pystr::char_offsets(s);
        auto n = static_cast<int64_t>(offsets.size()) - 1;
        if (i < 0)
          i += n;
        if (i < 0 || i >= n)
          return missing_element(obj, key);
        auto at = static_cast<size_t>(i);
        return value(s.substr(offsets[at], offsets[at + 1] - offsets[at]));
      }
      if (key.is_string())
        return get_attribute(obj, key.as_string());
      return missing_element(obj, key);
    }
    case value_kind::dict:
    case value_kind::namespace_object: {
      if (const value* found = obj.as_dict().find(key))
        return *found;
      if (key.is_string()) {
        if (obj.is_dict() && has_method(obj, key.as_string()))
          return bind_method(obj, key.as_string());
        return missing_attribute(obj, key.as_string());
      }
      return missing_element(obj, key);
    }
    default:
      if (key.is_string())
        return missing_attribute(obj, key.as_string());
      return missing_element(obj, key);
  }
}

value get_slice(const value& obj, const value& start, const value& stop, const value& step) {
  if (obj.is_undefined())
    fail_undefined(obj);
  if (obj.is_list()) {
    const auto& data = obj.as_list();
    std::vector<value> items;
    for (size_t i : slice_positions(data.items.size(), start, stop, step))
      items.push_back(data.items[i]);
    return data.is_tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    charge_current_render(s.size() / bytes_per_step);
    std::string out;
    if (pystr::is_ascii(s)) {
      for (size_t i : slice_positions(s.size(), start, stop, step))
        out.push_back(s[i]);
    } else {
      auto offsets = pystr::char_offsets(s);
      for (size_t i : slice_positions(offsets.size() - 1, start, stop, step))
        out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return value(std::move(out));
  }
  // Jinja compiles slices to a plain Python subscript, bypassing its forgiving getitem: other types fail.
  if (obj.is_dict())
    throw value_error("unhashable type: 'slice'");
  throw value_error("'" + std::string(obj.type_name()) + "' object is not subscriptable");
}

value apply_binary(binary_op op, const value& a, const value& b, render_context& ctx) {
  if (op == binary_op::concat) {
    std::string out = to_string(a);
    if (b.is_string()) {
      ctx.check_string_size(out.size() + b.as_string().size());
      out += b.as_string();
    } else {
      append_string(out, b);
      ctx.check_string_size(out.size());
    }
    ctx.charge(out.size() / bytes_per_step);
    return value(std::move(out));
  }
  // str % x formats; Python lets Undefined through there (it has __getitem__, so it passes for a mapping).
  if (op == binary_op::modulo && a.is_string())
    return value(percent_format(a.as_string(), b, ctx));
  if (a.is_undefined())
    fail_undefined(a);
  if (b.is_undefined())
    fail_undefined(b);
  if (is_numeric(a) && is_numeric(b))
    return numeric_binary(op, a, b);
  switch (op) {
    case binary_op::add:
      if (a.is_string() && b.is_string()) {
        ctx.check_string_size(a.as_string().size() + b.as_string().size());
        ctx.charge((a.as_string().size() + b.as_string().size()) / bytes_per_step);
        return value(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
        const auto& x = a.as_list().items;
        const auto& y = b.as_list().items;
        ctx.check_items(x.size() + y.size());
        ctx.charge(x.size() + y.size());
        std::vector<value> items(x);
        items.insert(items.end(), y.begin(), y.end());
        return a.as_list().is_tuple ? value::tuple(std::move(items)) : value::list(std::move(items));
      }
      if (a.is_string() || a.is_list())
        throw value_error("can only concatenate " + std::string(a.type_name()) + " (not \"" +
                          std::string(b.type_name()) + "\") to " + std::string(a.type_name()));
      break;
    case binary_op::multiply:
      if (a.is_string() && is_intlike(b))
        return value(repeat_string(a.as_string(), to_int(b), ctx));
      if (is_intlike(a) && b.is_string())
        return value(repeat_string(b.as_string(), to_int(a), ctx));
      if (a.is_list() && is_intlike(b))
        return repeat_list(a, to_int(b), ctx);
      if (is_intlike(a) && b.is_list())
        return repeat_list(b, to_int(a), ctx);
      break;
    default:
      break;
  }
  unsupported_operands(op_symbol(op), a, b);
}

value apply_unary(unary_op op, const value& v) {
  if (v.is_undefined())
    fail_undefined(v);
  if (op == unary_op::logical_not)
    return value(!v.truthy());
  if (is_intlike(v)) {
    int64_t i = to_int(v);
    if (op == unary_op::plus)
      return value(i);
    if (i == std::numeric_limits<int64_t>::min())
      throw value_error("integer overflow in unary -");
    return value(-i);
  }
  if (v.is_float())
    return value(op == unary_op::plus ? v.as_double() : -v.as_double());
  throw value_error(std::string("bad operand type for unary ") + (op == unary_op::plus ? "+" : "-") + ": '" +
                    std::string(v.type_name()) + "'");
}

bool equals(const value& a, const value& b) { return equals_at(a, b, 0); }

int compare(const value& a, const value& b) { return compare_at(a, b, 0); }

bool apply_compare(compare_op op, const value& a, const value& b) {
  switch (op) {
    case compare_op::eq:
      return equals(a, b);
    case compare_op::ne:
      return !equals(a, b);
    case compare_op::lt:
      return compare(a, b) < 0;
    case compare_op::le:
      return compare(a, b) <= 0;
    case compare_op::gt:
      return compare(a, b) > 0;
    case compare_op::ge:
      return compare(a, b) >= 0;
    case compare_op::in:
      return contains(b, a);
    case compare_op::not_in:
      return !contains(b, a);
  }
  return false;
}

bool contains(const value& container, const value& item) {
  switch (container.kind()) {
    case value_kind::undefined:
      return false;
    case value_kind::string:
      if (!item.is_string())
        throw value_error("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
      charge_current_render(container.as_string().size() / bytes_per_step);
      return container.as_string().find(item.as_string()) != std::string::npos;
    case value_kind::list:
      for (const auto& v : container.as_list().items)
        if (equals(v, item))
          return true;
      return false;
    case value_kind::dict:
      if (item.is_dict() || item.is_namespace() || (item.is_list() && !item.as_list().is_tuple))
        throw value_error("unhashable type: '" + std::string(item.type_name()) + "'");
      return container.as_dict().find(item) != nullptr;
    default:
      throw value_error("argument of type '" + std::string(container.type_name()) + "' is not iterable");
  }
}

std::vector<value> iterate(const value& v, render_context& ctx) {
  std::vector<value> items;
  switch (v.kind()) {
    case value_kind::undefined:
      return items;
    case value_kind::list:
      ctx.charge(v.as_list().items.size());
      return v.as_list().items;
    case value_kind::dict:
      ctx.charge(v.as_dict().size());
      items.reserve(v.as_dict().size());
      for (const auto& [key, unused] : v.as_dict().entries())
        items.push_back(key);
      return items;
    case value_kind::string: {
      const std::string& s = v.as_string();
      ctx.charge(s.size());
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        pystr::next_char(s, i);
        items.emplace_back(s.substr(start, i - start));
      }
      return items;
    }
    default:
      throw value_error("'" + std::string(v.type_name()) + "' object is not iterable");
  }
}

size_t length_of(const value& v) {
  switch (v.kind()) {
    case value_kind::undefined:
      return 0;
    case value_kind::string:
      return pystr::length(v.as_string());
    case value_kind::list:
      return v.as_list().items.size();
    case value_kind::dict:
      return v.as_dict().size();
    default:
      throw value_error("object of type '" + std::string(v.type_name()) + "' has no len()");
  }
}

std::string percent_format(std::string_view format, const value& args, render_context& ctx) {
  std::vector<value> positional;
  const value* mapping = nullptr;
  if (args.is_list() && args.as_list().is_tuple)
    positional = args.as_list().items;
  else
    positional.push_back(args);
  if (args.is_dict())
    mapping = &args;  // also usable as the single positional argument, as in Python
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size();) {
    char c = format[i++];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (i >= format.size())
      throw value_error("incomplete format");
    const value* arg = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string_view::npos)
        throw value_error("incomplete format key");
      if (mapping == nullptr)
        throw value_error("format requires a mapping");
      const value* found = mapping->as_dict().find(format.substr(i + 1, close - i - 1));
      if (found == nullptr)
        throw value_error("format key '" + std::string(format.substr(i + 1, close - i - 1)) + "' not found");
      arg = found;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
      flags.push_back(format[i++]);
    int64_t width = -1;
    int64_t precision = -1;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9' && width < 100000)
      width = std::max<int64_t>(width, 0) * 10 + (format[i++] - '0');
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9' && precision < 100000)
        precision = precision * 10 + (format[i++] - '0');
    }
    if (i >= format.size())
      throw value_error("incomplete format");
    char type = format[i++];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (next >= positional.size())
        throw value_error("not enough arguments for format string");
      arg = &positional[next++];
    }
    ctx.check_string_size(out.size() + static_cast<size_t>(std::max<int64_t>(width, 0)));
    bool left = flags.find('-') != std::string::npos;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? to_string(*arg) : to_repr(*arg);
        if (precision >= 0) {
          auto offsets = pystr::char_offsets(s);
          if (static_cast<size_t>(precision) + 1 < offsets.size())
            s.resize(offsets[static_cast<size_t>(precision)]);
        }
        out += pad(std::move(s), width, left);
        break;
      }
      case 'c': {
        std::string s;
        if (arg->is_string() && pystr::length(arg->as_string()) == 1)
          s = arg->as_string();
        else if (is_intlike(*arg) && to_int(*arg) >= 0 && to_int(*arg) <= 0x10FFFF)
          pystr::append_utf8(s, static_cast<char32_t>(to_int(*arg)));
        else
          throw value_error("%c requires an int or a single character");
        out += pad(std::move(s), width, left);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!is_numeric(*arg))
          throw value_error(std::string("%") + type + " format: a real number is required, not " +
                            std::string(arg->type_name()));
        long long n = 0;
        if (arg->is_float()) {
          double d = arg->as_double();
          if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
            throw value_error("cannot convert float to integer");
          n = static_cast<long long>(d);
        } else {
          n = to_int(*arg);
        }
        std::string spec = "%" + flags + (width >= 0 ? std::to_string(width) : "") +
                           (precision >= 0 ? "." + std::to_string(precision) : "") + "ll" +
                           (type == 'u' || type == 'i' ? 'd' : type);
        char buf[256];
        if (type == 'x' || type == 'X' || type == 'o') {
          // Python prints the sign, C would print the two's complement.
          unsigned long long magnitude =
              n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
          std::snprintf(buf, sizeof buf, ("%ll" + std::string(1, type)).c_str(), magnitude);
          std::string digits = buf;
          if (precision > static_cast<int64_t>(digits.size()))
            digits.insert(0, static_cast<size_t>(precision) - digits.size(), '0');
          if (flags.find('#') != std::string::npos)
            digits.insert(0, type == 'o' ? "0o" : type == 'x' ? "0x" : "0X");
          std::string sign = n < 0                                  ? "-"
                             : flags.find('+') != std::string::npos ? "+"
                             : flags.find(' ') != std::string::npos ? " "
                                                                    : "";
          bool zero = flags.find('0') != std::string::npos && !left;
          std::string body = sign + digits;
          if (zero && width > static_cast<int64_t>(body.size()))
            body = sign + std::string(static_cast<size_t>(width) - body.size(), '0') + digits;
          out += pad(std::move(body), width, left);
        } else {
          if (width > 200 || precision > 200)
            throw value_error("format width or precision too large");
          std::snprintf(buf, sizeof buf, spec.c_str(), n);
          out += buf;
        }
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!is_numeric(*arg))
          throw value_error(std::string("%") + type + " format: a real number is required, not " +
                            std::string(arg->type_name()));
        if (width > 200 || precision > 200)
          throw value_error("format width or precision too large");
        std::string spec = "%" + flags + (width >= 0 ? std::to_string(width) : "") +
                           (precision >= 0 ? "." + std::to_string(precision) : "") + type;
        char buf[512];
        std::snprintf(buf, sizeof buf, spec.c_str(), to_double(*arg));
        out += buf;
        break;
      }
      default:
        throw value_error(std::string("unsupported format character '") + type + "'");
    }
  }
  // Python skips this check when the single argument supports indexing (a list or dict).
  bool indexable =
      !(args.is_list() && args.as_list().is_tuple) && (args.is_list() || args.is_dict() || args.is_undefined());
  if (!indexable && next < positional.size())
    throw value_error("not all arguments converted during string formatting");
  ctx.check_string_size(out.size());
  return out;
}

}  // namespace actorllm::text::jinja
