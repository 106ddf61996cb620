// The thread's current render, for value operations that have no context at hand.
#include "text/jinja/render_context.hpp"

namespace actorllm::text::jinja {
namespace {

thread_local render_context* t_current = nullptr;

}  // namespace

render_context* render_context::current() noexcept { return t_current; }

render_context::activation::activation(render_context& ctx) : previous_(t_current) { t_current = &ctx; }

render_context::activation::~activation() { t_current = previous_; }

void charge_current_render(uint64_t n) {
  if (t_current != nullptr)
    t_current->charge(n);
}

void check_current_string_size(size_t bytes) {
  if (t_current != nullptr)
    t_current->check_string_size(bytes);
}

}  // namespace actorllm::text::jinja
