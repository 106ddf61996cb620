// Formatting of template errors.
#include "text/jinja/error.hpp"

namespace actorllm::text::jinja {
namespace {

std::string format_error(const std::string& source_name, source_pos pos, const std::string& reason) {
  return source_name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " + reason;
}

}  // namespace

template_error::template_error(error_kind kind, const std::string& source_name, source_pos pos, std::string reason)
    : std::runtime_error(format_error(source_name, pos, reason)), kind_(kind), pos_(pos), reason_(std::move(reason)) {}

}  // namespace actorllm::text::jinja
