// Jinja's builtin filters (`x | trim`, `tools | tojson(indent=4)`, `messages | selectattr("role", "equalto",
// "user") | list`, ...), with Jinja 3's semantics, plus `tojson` as Hugging Face overrides it: Python's
// json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
#pragma once

#include <string_view>

#include "text/jinja/ast.hpp"

namespace actorllm::text::jinja {

/// The builtin filter called `name`, or nullptr when there is none.
filter_function find_filter(std::string_view name);

}  // namespace actorllm::text::jinja
