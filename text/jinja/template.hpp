// A parsed Jinja template: the entry point of the engine. Parse once (a chat template is parsed when its model
// loads), render many times, from any number of threads at once.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/error.hpp"
#include "text/jinja/render_context.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

/// How to read the source. The defaults are the environment Hugging Face renders chat templates in.
struct parse_options {
  /// Name used in error messages ("NAME:LINE:COLUMN: ...").
  std::string name = "template";
  /// Remove the first newline after a block tag.
  bool trim_blocks = true;
  /// Strip blanks from the start of a line up to a block or comment tag.
  bool lstrip_blocks = true;
  /// Keep a single trailing newline of the source (Jinja drops it by default).
  bool keep_trailing_newline = false;
};

/// Per-render settings.
struct render_options {
  render_limits limits;
  /// The time strftime_now() formats; the current time when absent.
  std::optional<std::chrono::system_clock::time_point> now;
};

/// An immutable parsed template; cheap to copy (copies share the tree).
class compiled_template {
 public:
  /// Parses `source`. Throws template_error (error_kind::syntax) with the line and column of the first error.
  static compiled_template parse(std::string_view source, const parse_options& options = {});

  /// Renders with `variables`, a dict of template variables (Undefined for none). The variables are read-only
  /// to the template. Throws template_error: error_kind::raised for raise_exception(), limit for a render that
  /// passes options.limits, runtime for everything else.
  std::string render(const value& variables, const render_options& options = {}) const;

  /// The name given at parse time.
  const std::string& name() const;

 private:
  struct program;
  explicit compiled_template(std::shared_ptr<const program> p) : program_(std::move(p)) {}
  std::shared_ptr<const program> program_;
};

}  // namespace actorllm::text::jinja
