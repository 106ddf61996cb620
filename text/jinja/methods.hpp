// Methods of Python's str, list and dict that chat templates call: `content.strip()`, `content.split('</think>')`,
// `message.get('tool_calls')`, `tool.items()`, `ns.items.append(x)`, ... Mutating methods work only on containers
// the template itself created (see value::mutable_list).
#pragma once

#include <string_view>

#include "text/jinja/callable.hpp"
#include "text/jinja/render_context.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

/// Whether `obj` (a str, list or dict) has a method called `name`.
bool has_method(const value& obj, std::string_view name);

/// Calls obj.name(args). Throws value_error for an unknown method or bad arguments.
value call_method(render_context& ctx, const value& obj, std::string_view name, call_arguments& args);

/// obj.name as a callable value (a bound method), for `obj.name` used without calling it right away.
value bind_method(const value& obj, std::string_view name);

}  // namespace actorllm::text::jinja
