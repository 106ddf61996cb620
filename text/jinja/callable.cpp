// Host functions as values, and Python-style argument binding.
#include "text/jinja/callable.hpp"

#include "text/jinja/error.hpp"

namespace actorllm::text::jinja {
namespace {

class native_callable final : public callable {
 public:
  native_callable(std::string name, native_function fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string_view name() const noexcept override { return name_; }
  value call(render_context& ctx, call_arguments& args) const override { return fn_(ctx, args); }

 private:
  std::string name_;
  native_function fn_;
};

}  // namespace

value make_function(std::string name, native_function fn) {
  return value::from_callable(std::make_shared<native_callable>(std::move(name), std::move(fn)));
}

bound_arguments::bound_arguments(std::string_view function, call_arguments& args,
                                 std::initializer_list<std::string_view> params, size_t required)
    : function_(function), names_(params), values_(params.size()), given_(params.size(), false) {
  if (args.positional.size() > names_.size())
    throw value_error(function_ + "() takes at most " + std::to_string(names_.size()) + " argument" +
                      (names_.size() == 1 ? "" : "s") + " (" + std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = std::move(args.positional[i]);
    given_[i] = true;
  }
  for (auto& [key, item] : args.keyword) {
    size_t i = 0;
    while (i < names_.size() && names_[i] != key)
      ++i;
    if (i == names_.size())
      throw value_error(function_ + "() got an unexpected keyword argument '" + key + "'");
    if (given_[i])
      throw value_error(function_ + "() got multiple values for argument '" + key + "'");
    values_[i] = std::move(item);
    given_[i] = true;
  }
  for (size_t i = 0; i < required && i < names_.size(); ++i)
    if (!given_[i])
      throw value_error(function_ + "() missing required argument '" + std::string(names_[i]) + "'");
}

int64_t bound_arguments::get_int(size_t i, int64_t fallback) const {
  if (!given_[i])
    return fallback;
  const value& v = values_[i];
  if (v.is_int())
    return v.as_int();
  if (v.is_bool())
    return v.as_bool() ? 1 : 0;
  throw value_error(function_ + "(): argument '" + std::string(names_[i]) + "' must be an integer, not '" +
                    std::string(v.type_name()) + "'");
}

std::optional<std::string> bound_arguments::get_string(size_t i) const {
  if (!given_[i] || values_[i].is_none())
    return std::nullopt;
  const value& v = values_[i];
  if (!v.is_string())
    throw value_error(function_ + "(): argument '" + std::string(names_[i]) + "' must be a string, not '" +
                      std::string(v.type_name()) + "'");
  return v.as_string();
}

}  // namespace actorllm::text::jinja
