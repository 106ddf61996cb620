// Builtin tests.
#include "text/jinja/tests.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "text/jinja/callable.hpp"
#include "text/jinja/operations.hpp"
#include "text/jinja/pystring.hpp"
#include "text/jinja/render_context.hpp"

namespace actorllm::text::jinja {
namespace {

void no_args(std::string_view name, call_arguments& args) {
  if (!args.positional.empty() || !args.keyword.empty())
    throw value_error("test '" + std::string(name) + "' takes no arguments");
}

const value& one_arg(std::string_view name, call_arguments& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    throw value_error("test '" + std::string(name) + "' takes exactly one argument");
  return args.positional[0];
}

#define ACTORLLM_JINJA_TYPE_TEST(fn, name, expr)                   \
  bool fn(render_context&, const value& v, call_arguments& args) { \
    no_args(name, args);                                           \
    return (expr);                                                 \
  }

ACTORLLM_JINJA_TYPE_TEST(test_defined, "defined", !v.is_undefined())
ACTORLLM_JINJA_TYPE_TEST(test_undefined, "undefined", v.is_undefined())
ACTORLLM_JINJA_TYPE_TEST(test_none, "none", v.is_none())
ACTORLLM_JINJA_TYPE_TEST(test_boolean, "boolean", v.is_bool())
ACTORLLM_JINJA_TYPE_TEST(test_true, "true", v.is_bool() && v.as_bool())
ACTORLLM_JINJA_TYPE_TEST(test_false, "false", v.is_bool() && !v.as_bool())
ACTORLLM_JINJA_TYPE_TEST(test_integer, "integer", v.is_int())
ACTORLLM_JINJA_TYPE_TEST(test_float, "float", v.is_float())
// Python's numbers.Number includes bool.
ACTORLLM_JINJA_TYPE_TEST(test_number, "number", v.is_int() || v.is_float() || v.is_bool())
ACTORLLM_JINJA_TYPE_TEST(test_string, "string", v.is_string())
ACTORLLM_JINJA_TYPE_TEST(test_mapping, "mapping", v.is_dict())
// Jinja's Undefined defines __iter__, __len__ and __getitem__, so it passes these two, as in Jinja.
ACTORLLM_JINJA_TYPE_TEST(test_iterable, "iterable", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
ACTORLLM_JINJA_TYPE_TEST(test_sequence, "sequence", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
ACTORLLM_JINJA_TYPE_TEST(test_callable, "callable", v.is_callable() || v.is_undefined())
ACTORLLM_JINJA_TYPE_TEST(test_lower, "lower", pystr::is_lower_string(to_string(v)))
ACTORLLM_JINJA_TYPE_TEST(test_upper, "upper", pystr::is_upper_string(to_string(v)))

#undef ACTORLLM_JINJA_TYPE_TEST

// Nothing is markup-escaped here (HF renders with autoescape off).
bool test_escaped(render_context&, const value&, call_arguments& args) {
  no_args("escaped", args);
  return false;
}

bool test_even(render_context& ctx, const value& v, call_arguments& args) {
  no_args("even", args);
  return equals(apply_binary(binary_op::modulo, v, value(2), ctx), value(0));
}

bool test_odd(render_context& ctx, const value& v, call_arguments& args) {
  no_args("odd", args);
  return equals(apply_binary(binary_op::modulo, v, value(2), ctx), value(1));
}

bool test_divisibleby(render_context& ctx, const value& v, call_arguments& args) {
  return equals(apply_binary(binary_op::modulo, v, one_arg("divisibleby", args), ctx), value(0));
}

bool test_eq(render_context&, const value& v, call_arguments& args) { return equals(v, one_arg("eq", args)); }
bool test_ne(render_context&, const value& v, call_arguments& args) { return !equals(v, one_arg("ne", args)); }
bool test_lt(render_context&, const value& v, call_arguments& args) { return compare(v, one_arg("lt", args)) < 0; }
bool test_le(render_context&, const value& v, call_arguments& args) { return compare(v, one_arg("le", args)) <= 0; }
bool test_gt(render_context&, const value& v, call_arguments& args) { return compare(v, one_arg("gt", args)) > 0; }
bool test_ge(render_context&, const value& v, call_arguments& args) { return compare(v, one_arg("ge", args)) >= 0; }
bool test_in(render_context&, const value& v, call_arguments& args) { return contains(one_arg("in", args), v); }

bool test_sameas(render_context&, const value& v, call_arguments& args) {
  const value& other = one_arg("sameas", args);
  if (v.identity() != nullptr || other.identity() != nullptr)
    return v.identity() == other.identity();
  return v.kind() == other.kind() && equals(v, other);
}

struct named_test {
  std::string_view name;
  test_function fn;
};

constexpr std::array<named_test, 36> tests = {{
    {"defined", test_defined},
    {"undefined", test_undefined},
    {"none", test_none},
    {"boolean", test_boolean},
    {"true", test_true},
    {"false", test_false},
    {"integer", test_integer},
    {"float", test_float},
    {"number", test_number},
    {"string", test_string},
    {"mapping", test_mapping},
    {"iterable", test_iterable},
    {"sequence", test_sequence},
    {"callable", test_callable},
    {"escaped", test_escaped},
    {"lower", test_lower},
    {"upper", test_upper},
    {"even", test_even},
    {"odd", test_odd},
    {"divisibleby", test_divisibleby},
    {"eq", test_eq},
    {"equalto", test_eq},
    {"==", test_eq},
    {"ne", test_ne},
    {"!=", test_ne},
    {"lt", test_lt},
    {"lessthan", test_lt},
    {"<", test_lt},
    {"le", test_le},
    {"<=", test_le},
    {"gt", test_gt},
    {"greaterthan", test_gt},
    {">", test_gt},
    {"ge", test_ge},
    {">=", test_ge},
    {"in", test_in},
}};

}  // namespace

test_function find_test(std::string_view name) {
  if (name == "sameas")
    return test_sameas;
  auto it = std::find_if(tests.begin(), tests.end(), [&](const named_test& t) { return t.name == name; });
  return it == tests.end() ? nullptr : it->fn;
}

}  // namespace actorllm::text::jinja
