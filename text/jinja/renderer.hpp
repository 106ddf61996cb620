// Walks a parsed template and produces its output: scopes as Jinja has them (a for loop's body and a macro get
// their own, `if` does not; `{% set %}` inside a loop does not leak out, which is why templates use namespace()),
// the `loop` object, macros and call blocks, break/continue, and error positions.
#pragma once

#include <string>

#include "text/jinja/ast.hpp"
#include "text/jinja/render_context.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

/// Renders `body`. `variables` (a dict, or Undefined for none) is layered over the builtin globals. Errors are
/// template_error naming `source_name` and the position of the failing expression or statement. Call inside a
/// render_scope, which owns the containers the render creates.
std::string render_statements(const stmt_list& body, const std::string& source_name, const value& variables,
                              render_context& ctx);

}  // namespace actorllm::text::jinja
