// Things a template can call: macros, builtin globals (range, namespace, raise_exception, ...), bound methods and
// functions the host adds. Also the Python-style binding of call arguments to parameters that all of them use.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

struct render_context;

/// Arguments of one call, as written at the call site: `f(1, 2, key=3)`.
struct call_arguments {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> keyword;
};

/// A callable value.
class callable {
 public:
  virtual ~callable() = default;
  /// Name for messages and repr.
  virtual std::string_view name() const noexcept = 0;
  /// Runs the call. Errors are value_error (or template_error from a macro body).
  virtual value call(render_context& ctx, call_arguments& args) const = 0;
};

/// Signature of a host function.
using native_function = std::function<value(render_context& ctx, call_arguments& args)>;

/// Wraps a host function as a callable value.
value make_function(std::string name, native_function fn);

/// The arguments of a call bound to a fixed parameter list, as Python binds `def f(a, b=None, c=0)`.
class bound_arguments {
 public:
  /// Throws value_error naming `function` when there are too many positional arguments, an unknown keyword, a
  /// parameter given twice, or one of the first `required` parameters missing.
  bound_arguments(std::string_view function, call_arguments& args, std::initializer_list<std::string_view> params,
                  size_t required = 0);

  /// Whether parameter i was given.
  bool has(size_t i) const { return given_[i]; }
  /// Parameter i, or Undefined when not given.
  const value& operator[](size_t i) const { return values_[i]; }
  /// Parameter i, or `fallback`.
  value get(size_t i, value fallback) const { return given_[i] ? values_[i] : std::move(fallback); }
  /// Parameter i as an int (bool counts, as in Python); throws value_error for other types.
  int64_t get_int(size_t i, int64_t fallback) const;
  /// Parameter i as a str; throws value_error for other types. None counts as absent.
  std::optional<std::string> get_string(size_t i) const;

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<value> values_;
  std::vector<bool> given_;
};

}  // namespace actorllm::text::jinja
