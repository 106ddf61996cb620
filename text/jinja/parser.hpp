// Builds the syntax tree from tokens, following the grammar and operator precedence of Jinja 3's parser
// (jinja2/parser.py), including its quirks that templates rely on: filters bind tighter than arithmetic
// (`'a' + x | trim`), `not x is defined` means `not (x is defined)`, a test takes one argument without parentheses
// (`x is divisibleby 3`), and `for ... in` iterables take no `if ... else` (the `if` filters the loop).
#pragma once

#include <string>
#include <vector>

#include "text/jinja/ast.hpp"
#include "text/jinja/lexer.hpp"

namespace actorllm::text::jinja {

/// Parses a token stream (from tokenize) into statements. Throws template_error (syntax) naming `source_name`, line
/// and column: unexpected tokens, unclosed or mismatched blocks, unknown filters or tests, nesting deeper than the
/// parser allows.
stmt_list parse_tokens(std::vector<token> tokens, const std::string& source_name);

}  // namespace actorllm::text::jinja
