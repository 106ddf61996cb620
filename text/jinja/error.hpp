// Errors of the Jinja engine. Parsing and rendering throw (the parser tier of the house style); chat_template and
// its callers catch template_error at their boundary and turn it into a clear message for the user.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace actorllm::text::jinja {

/// What went wrong, so that a server can tell a broken template (its operator's fault) from a request that the
/// template rejects with raise_exception (the client's fault).
enum class error_kind : uint8_t {
  syntax,   ///< the source is not a valid template
  runtime,  ///< an operation failed while rendering (type error, undefined value, unknown method, ...)
  raised,   ///< the template called raise_exception(message)
  limit,    ///< rendering exceeded a render_limits budget (output size, steps, nesting depth)
};

/// A position in the template source: 1-based line and column (columns count code points).
struct source_pos {
  uint32_t line = 0;
  uint32_t column = 0;
};

/// The one error type that leaves the engine. what() reads "NAME:LINE:COLUMN: REASON", e.g.
/// "chat template:12:5: unexpected token 'endfor'".
class template_error : public std::runtime_error {
 public:
  template_error(error_kind kind, const std::string& source_name, source_pos pos, std::string reason);

  /// Which kind of failure this is.
  error_kind kind() const noexcept { return kind_; }
  /// Where in the source it happened.
  source_pos position() const noexcept { return pos_; }
  uint32_t line() const noexcept { return pos_.line; }
  uint32_t column() const noexcept { return pos_.column; }
  /// The message without the location; for raise_exception, exactly the template's message.
  const std::string& reason() const noexcept { return reason_; }

 private:
  error_kind kind_;
  source_pos pos_;
  std::string reason_;
};

/// Thrown by value operations (filters, methods, arithmetic) that do not know where in the template they run.
/// The renderer catches it at the innermost expression that knows its position and rethrows a template_error.
class value_error : public std::runtime_error {
 public:
  explicit value_error(std::string reason, error_kind kind = error_kind::runtime)
      : std::runtime_error(std::move(reason)), kind_(kind) {}
  error_kind kind() const noexcept { return kind_; }

 private:
  error_kind kind_;
};

}  // namespace actorllm::text::jinja
