// The budget and state one render carries through filters, methods and calls: limits that keep a hostile template
// from exhausting the process, and the clock that strftime_now reads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/jinja/error.hpp"

namespace actorllm::text::jinja {

/// Bounds on one render. A template that passes one fails with error_kind::limit instead of exhausting memory,
/// the stack or the CPU.
struct render_limits {
  /// Size of the rendered text.
  size_t max_output_bytes = size_t{64} << 20;
  /// Size of any one string built while rendering.
  size_t max_string_bytes = size_t{64} << 20;
  /// Length of any one list built while rendering (range(), repetition, ...).
  size_t max_items = size_t{1} << 20;
  /// Evaluation steps (expressions, statements, loop iterations, items touched by filters).
  uint64_t max_steps = 20'000'000;
  /// Nesting of evaluation: nested expressions, statements and macro calls together. Keeps recursion off the
  /// end of the stack.
  uint32_t max_depth = 400;
};

/// State of one render that builtins need.
struct render_context {
  render_limits limits;
  /// What strftime_now() formats.
  std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
  uint64_t steps = 0;
  uint32_t depth = 0;

  /// Counts `n` steps of work; throws value_error(limit) past the budget.
  void charge(uint64_t n = 1) {
    steps += n;
    if (steps > limits.max_steps)
      throw value_error("template exceeded its budget of " + std::to_string(limits.max_steps) + " evaluation steps",
                        error_kind::limit);
  }
  /// Throws value_error(limit) when a string of `bytes` would pass the limit.
  void check_string_size(size_t bytes) const {
    if (bytes > limits.max_string_bytes)
      throw value_error("string of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                            std::to_string(limits.max_string_bytes),
                        error_kind::limit);
  }
  /// Throws value_error(limit) when a list of `n` items would pass the limit.
  void check_items(size_t n) const {
    if (n > limits.max_items)
      throw value_error(
          "list of " + std::to_string(n) + " items exceeds the limit of " + std::to_string(limits.max_items),
          error_kind::limit);
  }

  /// The render running on this thread, or nullptr. Operations that walk whole values without a context at hand
  /// (printing, comparing, serializing, hashing) charge their work to it: containers are shared, so a list that
  /// holds one list twice, sixty levels deep, prints as 2^60 items, and only a budget stops that.
  static render_context* current() noexcept;

  /// Makes a context the current one of this thread while it lives (renders may nest).
  class activation {
   public:
    explicit activation(render_context& ctx);
    ~activation();
    activation(const activation&) = delete;
    activation& operator=(const activation&) = delete;

   private:
    render_context* previous_;
  };
};

/// charge(n) on the current render, if there is one.
void charge_current_render(uint64_t n);
/// check_string_size(bytes) on the current render, if there is one.
void check_current_string_size(size_t bytes);

}  // namespace actorllm::text::jinja
