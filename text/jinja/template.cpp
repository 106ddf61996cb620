// compiled_template: lexer + parser at parse time, renderer at render time.
#include "text/jinja/template.hpp"

#include <stdexcept>

#include "text/jinja/ast.hpp"
#include "text/jinja/lexer.hpp"
#include "text/jinja/parser.hpp"
#include "text/jinja/renderer.hpp"

namespace actorllm::text::jinja {

struct compiled_template::program {
  std::string name;
  stmt_list body;
};

compiled_template compiled_template::parse(std::string_view source, const parse_options& options) {
  auto p = std::make_shared<program>();
  p->name = options.name;
  lexer_options lexing{options.trim_blocks, options.lstrip_blocks, options.keep_trailing_newline};
  p->body = parse_tokens(tokenize(source, lexing, p->name), p->name);
  return compiled_template(std::move(p));
}

std::string compiled_template::render(const value& variables, const render_options& options) const {
  if (!variables.is_undefined() && !variables.is_dict() && !variables.is_namespace())
    throw std::invalid_argument("template variables must be a dict, not " + std::string(variables.type_name()));
  // The scope must outlive everything the render creates, so that its end can break reference cycles.
  render_scope scope;
  render_context ctx;
  ctx.limits = options.limits;
  if (options.now)
    ctx.now = *options.now;
  try {
    return render_statements(program_->body, program_->name, variables, ctx);
  } catch (const value_error& e) {
    // The renderer attaches positions; this only catches what escapes outside any statement.
    throw template_error(e.kind(), program_->name, source_pos{1, 1}, e.what());
  }
}

const std::string& compiled_template::name() const { return program_->name; }

}  // namespace actorllm::text::jinja
