// Jinja's builtin tests (`x is defined`, `x is string`, `n is divisibleby 3`, `role is equalto "user"`, ...), with
// Python's type rules: a str is iterable and a sequence, a bool is a number but not an integer.
#pragma once

#include <string_view>

#include "text/jinja/ast.hpp"

namespace actorllm::text::jinja {

/// The builtin test called `name`, or nullptr when there is none.
test_function find_test(std::string_view name);

}  // namespace actorllm::text::jinja
