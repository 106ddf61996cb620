// What Jinja's operators and lookups do to values, with Python's rules: `obj.attr` and `obj[key]` as Jinja's
// environment.getattr/getitem (missing → Undefined, never an exception, except on Undefined itself), arithmetic
// with int/float promotion and str/list concatenation, deep ==, ordering only between comparable types.
#pragma once

#include <string_view>
#include <vector>

#include "text/jinja/ast.hpp"
#include "text/jinja/render_context.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

/// Throws value_error carrying the Undefined's message ("'x' is undefined").
[[noreturn]] void fail_undefined(const value& v);

/// `obj.name`: a method of str/list/dict (bound), a dict key or namespace attribute, else Undefined. Throws only
/// when obj is Undefined.
value get_attribute(const value& obj, std::string_view name);

/// `obj[key]`: list/str index (negative counts from the end), dict key; a missing item is Undefined, and a string
/// key falls back to an attribute as in Jinja. Throws only when obj is Undefined.
value get_item(const value& obj, const value& key);

/// `obj[start:stop:step]` for lists, tuples and strings; absent bounds are Undefined or None.
value get_slice(const value& obj, const value& start, const value& stop, const value& step);

/// Arithmetic and `~` (binary_op other than and/or).
value apply_binary(binary_op op, const value& a, const value& b, render_context& ctx);

/// Unary minus and plus.
value apply_unary(unary_op op, const value& v);

/// Python ==, deep for containers (Undefined equals Undefined, as in Jinja).
bool equals(const value& a, const value& b);

/// Python ordering: negative, zero or positive. Throws value_error for types Python cannot order. NaN sorts
/// after every number, so that sorting stays a strict weak order.
int compare(const value& a, const value& b);

/// Evaluates one comparison operator.
bool apply_compare(compare_op op, const value& a, const value& b);

/// Python `item in container`.
bool contains(const value& container, const value& item);

/// The items a for loop sees: list items, dict keys, the characters of a string, nothing for Undefined. Throws
/// value_error for other types. The result is a copy, so the loop is safe from changes to the container.
std::vector<value> iterate(const value& v, render_context& ctx);

/// len(): characters of a string, items of a list, entries of a dict, 0 for Undefined.
size_t length_of(const value& v);

/// Python's `format % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision, and
/// %(name)s with a dict).
std::string percent_format(std::string_view format, const value& args, render_context& ctx);

}  // namespace actorllm::text::jinja
