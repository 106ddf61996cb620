// Splits template source into text and the tokens inside {{ }} and {% %} tags, applying Jinja's whitespace rules
// on the way: `{%-`/`-%}` trimming, trim_blocks and lstrip_blocks (which HF turns on), newline normalization and
// the dropped trailing newline. The rules follow Jinja 3's lexer, because a chat template's output depends on every
// one of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/error.hpp"

namespace actorllm::text::jinja {

/// What a token is.
enum class token_kind : uint8_t {
  text,            ///< literal template text (already whitespace-processed)
  variable_begin,  ///< {{
  variable_end,    ///< }}
  block_begin,     ///< {%
  block_end,       ///< %}
  name,            ///< identifier or keyword
  string,          ///< string literal; text holds the decoded value
  integer,         ///< text holds the decimal value
  floating,        ///< text holds the literal without underscores
  op,              ///< operator or punctuation; text holds its spelling
  eof,
};

/// One token and where it starts.
struct token {
  token_kind kind;
  std::string text;
  source_pos pos;
};

/// Lexer switches; the defaults are Hugging Face's (trim_blocks and lstrip_blocks on).
struct lexer_options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

/// Tokenizes `source`. Throws template_error (syntax) naming `source_name`, line and column for an unterminated
/// tag, comment, string or raw block, an unexpected character or unbalanced brackets.
std::vector<token> tokenize(std::string_view source, const lexer_options& options, const std::string& source_name);

/// Human-readable name of a token for messages: "'endfor'", "end of template", ...
std::string describe(const token& t);

}  // namespace actorllm::text::jinja
