// Builtin global functions.
#include "text/jinja/globals.hpp"

#include <ctime>

#include "text/jinja/callable.hpp"
#include "text/jinja/operations.hpp"
#include "text/jinja/render_context.hpp"

namespace actorllm::text::jinja {
namespace {

int64_t range_argument(const value& v) {
  if (v.is_int())
    return v.as_int();
  if (v.is_bool())
    return v.as_bool() ? 1 : 0;
  if (v.is_undefined())
    fail_undefined(v);
  throw value_error("range(): '" + std::string(v.type_name()) + "' object cannot be interpreted as an integer");
}

value builtin_range(render_context& ctx, call_arguments& args) {
  if (!args.keyword.empty())
    throw value_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    throw value_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  int64_t start = p.size() == 1 ? 0 : range_argument(p[0]);
  int64_t stop = range_argument(p.size() == 1 ? p[0] : p[1]);
  int64_t step = p.size() == 3 ? range_argument(p[2]) : 1;
  if (step == 0)
    throw value_error("range() arg 3 must not be zero");
  // Count in unsigned arithmetic: stop - start can overflow int64.
  uint64_t count = 0;
  if (step > 0 && start < stop)
    count = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  else if (step < 0 && start > stop)
    count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  ctx.check_items(count > ctx.limits.max_items ? ctx.limits.max_items + 1 : static_cast<size_t>(count));
  ctx.charge(count);
  std::vector<value> items;
  items.reserve(static_cast<size_t>(count));
  int64_t current = start;
  for (uint64_t i = 0; i < count; ++i) {
    items.emplace_back(current);
    if (i + 1 < count)
      current += step;  // stays within [start, stop) so it cannot overflow
  }
  return value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs), shared by dict() and namespace().
void fill_dict(render_context& ctx, dict_data& target, call_arguments& args, std::string_view function) {
  if (args.positional.size() > 1)
    throw value_error(std::string(function) + "() expected at most 1 positional argument, got " +
                      std::to_string(args.positional.size()));
  if (!args.positional.empty()) {
    const value& source = args.positional[0];
    if (source.is_dict() || source.is_namespace()) {
      for (const auto& [key, item] : source.as_dict().entries())
        target.set(key, item);
    } else {
      for (const auto& pair : iterate(source, ctx)) {
        std::vector<value> kv = iterate(pair, ctx);
        if (kv.size() != 2)
          throw value_error(std::string(function) + "(): sequence element has length " + std::to_string(kv.size()) +
                            "; 2 is required");
        target.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [key, item] : args.keyword)
    target.set(value(key), item);
  ctx.check_items(target.size());
}

value builtin_namespace(render_context& ctx, call_arguments& args) {
  value ns = value::make_namespace();
  fill_dict(ctx, ns.mutable_dict(), args, "namespace");
  return ns;
}

value builtin_dict(render_context& ctx, call_arguments& args) {
  value d = value::dict();
  fill_dict(ctx, d.mutable_dict(), args, "dict");
  return d;
}

value builtin_raise_exception(render_context&, call_arguments& args) {
  bound_arguments a("raise_exception", args, {"message"}, 1);
  throw value_error(to_string(a[0]), error_kind::raised);
}

// HF's strftime_now(format): datetime.now().strftime(format), local time.
value builtin_strftime_now(render_context& ctx, call_arguments& args) {
  bound_arguments a("strftime_now", args, {"format"}, 1);
  if (!a[0].is_string())
    throw value_error("strftime_now(): format must be a string");
  const std::string& format = a[0].as_string();
  if (format.size() > 256)
    throw value_error("strftime_now(): format too long");
  std::time_t t = std::chrono::system_clock::to_time_t(ctx.now);
  std::tm local{};
  localtime_r(&t, &local);
  if (format.empty())
    return value("");
  std::string out(format.size() * 16 + 64, '\0');
  size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
  if (n == 0)
    throw value_error("strftime_now(): cannot format '" + format + "'");
  out.resize(n);
  return value(std::move(out));
}

}  // namespace

const std::vector<std::pair<std::string, value>>& builtin_globals() {
  static const std::vector<std::pair<std::string, value>> globals = {
      {"range", make_function("range", builtin_range)},
      {"namespace", make_function("namespace", builtin_namespace)},
      {"dict", make_function("dict", builtin_dict)},
      {"raise_exception", make_function("raise_exception", builtin_raise_exception)},
      {"strftime_now", make_function("strftime_now", builtin_strftime_now)},
  };
  return globals;
}

}  // namespace actorllm::text::jinja
