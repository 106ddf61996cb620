// The tree-walking renderer.
#include "text/jinja/renderer.hpp"

#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "text/jinja/callable.hpp"
#include "text/jinja/globals.hpp"
#include "text/jinja/methods.hpp"
#include "text/jinja/operations.hpp"

namespace actorllm::text::jinja {
namespace {

// Output costs one evaluation step per this many bytes.
constexpr size_t bytes_per_step = 64;
// Steps charged per loop iteration, for the bookkeeping (scope, loop object) an empty body still costs.
constexpr uint64_t iteration_steps = 8;

// One scope. Lookups walk the parent chain; assignments go to the innermost frame. A frame with many names (the
// globals of a render given many template variables: chat_template_kwargs) indexes them, so that filling it and
// each lookup stay linear and constant rather than a scan per name.
struct frame {
  explicit frame(std::shared_ptr<frame> p) : parent(std::move(p)) {}
  std::shared_ptr<frame> parent;

  value* find_local(std::string_view name) {
    if (!index_.empty()) {
      auto it = index_.find(name);
      return it == index_.end() ? nullptr : &vars_[it->second].second;
    }
    for (auto& [key, v] : vars_)
      if (key == name)
        return &v;
    return nullptr;
  }
  const value* lookup(std::string_view name) {
    for (frame* f = this; f != nullptr; f = f->parent.get())
      if (const value* v = f->find_local(name))
        return v;
    return nullptr;
  }
  void set(std::string_view name, value v) {
    if (value* slot = find_local(name)) {
      *slot = std::move(v);
      return;
    }
    vars_.emplace_back(std::string(name), std::move(v));
    if (!index_.empty())
      index_.emplace(vars_.back().first, vars_.size() - 1);
    else if (vars_.size() > index_threshold)
      for (size_t i = 0; i < vars_.size(); ++i)
        index_.emplace(vars_[i].first, i);
  }
  void clear() {
    vars_.clear();
    index_.clear();
  }

 private:
  static constexpr size_t index_threshold = 32;
  struct name_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::pair<std::string, value>> vars_;
  std::unordered_map<std::string, size_t, name_hash, std::equal_to<>> index_;
};
using frame_ptr = std::shared_ptr<frame>;

enum class flow : uint8_t { normal, break_loop, continue_loop };

// Counts nesting of evaluation so that deep recursion (a macro calling itself) fails cleanly.
class depth_guard {
 public:
  explicit depth_guard(render_context& ctx) : ctx_(ctx) {
    if (++ctx_.depth > ctx_.limits.max_depth) {
      --ctx_.depth;
      throw value_error("template nested too deeply while rendering (more than " +
                            std::to_string(ctx_.limits.max_depth) + " levels; a recursive macro?)",
                        error_kind::limit);
    }
  }
  ~depth_guard() { --ctx_.depth; }
  depth_guard(const depth_guard&) = delete;
  depth_guard& operator=(const depth_guard&) = delete;

 private:
  render_context& ctx_;
};

// What a macro or a call block's `caller` runs.
struct macro_definition {
  std::string name;
  const std::vector<macro_param>* params;
  const stmt_list* body;
};

class renderer;

class macro_callable final : public callable {
 public:
  macro_callable(renderer& r, macro_definition def, frame_ptr closure)
      : renderer_(r), def_(std::move(def)), closure_(std::move(closure)) {}
  std::string_view name() const noexcept override { return def_.name; }
  value call(render_context& ctx, call_arguments& args) const override;

 private:
  renderer& renderer_;
  macro_definition def_;
  frame_ptr closure_;
};

class renderer {
 public:
  renderer(const std::string& name, render_context& ctx) : name_(name), ctx_(ctx) {}
  renderer(const renderer&) = delete;
  renderer& operator=(const renderer&) = delete;

  // Frames captured by macros hold the macro, which holds the frame: empty them so the cycle is freed.
  ~renderer() {
    for (auto& f : captured_frames_)
      f->clear();
  }

  std::string run(const stmt_list& body, const value& variables) {
    auto globals = std::make_shared<frame>(nullptr);
    for (const auto& [key, fn] : builtin_globals())
      globals->set(key, fn);
    if (variables.is_dict() || variables.is_namespace()) {
      for (const auto& [key, v] : variables.as_dict().entries())
        if (key.is_string())
          globals->set(key.as_string(), v);
    }
    // Template-level assignments go to their own frame, so `{% set messages = messages[1:] %}` shadows the
    // caller's variable without touching it.
    auto top = std::make_shared<frame>(globals);
    std::string out;
    exec_body(body, top, out);
    return out;
  }

  value call_macro(const macro_definition& def, const frame_ptr& closure, call_arguments& args) {
    auto f = std::make_shared<frame>(closure);
    const auto& params = *def.params;
    std::vector<bool> given(params.size(), false);
    std::vector<value> extra_positional;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        f->set(params[i].name, std::move(args.positional[i]));
        given[i] = true;
      } else {
        extra_positional.push_back(std::move(args.positional[i]));
      }
    }
    value extra_keywords = value::dict();
    for (auto& [key, v] : args.keyword) {
      size_t i = 0;
      while (i < params.size() && params[i].name != key)
        ++i;
      if (i < params.size()) {
        if (given[i])
          throw value_error("macro '" + def.name + "' got multiple values for argument '" + key + "'");
        f->set(key, std::move(v));
        given[i] = true;
      } else if (key == "caller") {
        f->set("caller", std::move(v));
      } else {
        extra_keywords.mutable_dict().set(value(key), std::move(v));
      }
    }
    f->set("varargs", value::tuple(std::move(extra_positional)));
    f->set("kwargs", std::move(extra_keywords));
    // Defaults are evaluated at call time in the macro's scope, so they can refer to earlier parameters.
    for (size_t i = 0; i < params.size(); ++i) {
      if (given[i])
        continue;
      if (params[i].default_value)
        f->set(params[i].name, eval(*params[i].default_value, f));
      else
        f->set(params[i].name, value::undefined("parameter '" + params[i].name + "' was not provided"));
    }
    std::string out;
    exec_body(*def.body, f, out);
    return value(std::move(out));
  }

 private:
  // ---- output ----

  void emit(std::string& out, std::string_view piece) {
    if (out.size() + piece.size() > ctx_.limits.max_output_bytes)
      throw value_error(
          "rendered output exceeds the limit of " + std::to_string(ctx_.limits.max_output_bytes) + " bytes",
          error_kind::limit);
    ctx_.charge(piece.size() / bytes_per_step);
    out.append(piece);
  }

  void emit_value(std::string& out, const value& v) {
    if (v.is_string())
      emit(out, v.as_string());
    else if (!v.is_undefined())
      emit(out, to_string(v));
  }

  // ---- statements ----

  flow exec_body(const stmt_list& body, const frame_ptr& f, std::string& out) {
    for (const auto& s : body) {
      flow result = exec(*s, f, out);
      if (result != flow::normal)
        return result;
    }
    return flow::normal;
  }

  flow exec(const stmt& s, const frame_ptr& f, std::string& out) {
    try {
      depth_guard guard(ctx_);
      ctx_.charge();
      return exec_node(s, f, out);
    } catch (const value_error& e) {
      throw template_error(e.kind(), name_, s.pos, e.what());
    }
  }

  flow exec_node(const stmt& s, const frame_ptr& f, std::string& out) {
    switch (s.kind) {
      case stmt_kind::text:
        emit(out, static_cast<const text_stmt&>(s).text);
        return flow::normal;
      case stmt_kind::output:
        emit_value(out, eval(*static_cast<const output_stmt&>(s).expression, f));
        return flow::normal;
      case stmt_kind::if_chain: {
        const auto& node = static_cast<const if_stmt&>(s);
        for (const auto& [condition, body] : node.branches)
          if (eval(*condition, f).truthy())
            return exec_body(body, f, out);
        return exec_body(node.else_body, f, out);
      }
      case stmt_kind::for_loop:
        return exec_for(static_cast<const for_stmt&>(s), f, out);
      case stmt_kind::set: {
        const auto& node = static_cast<const set_stmt&>(s);
        assign(f, node.target, eval(*node.value_expr, f));
        return flow::normal;
      }
      case stmt_kind::set_block: {
        const auto& node = static_cast<const set_block_stmt&>(s);
        std::string body;
        exec_body(node.body, std::make_shared<frame>(f), body);
        value result(std::move(body));
        if (node.filters)
          result = apply_filter(static_cast<const filter_expr&>(*node.filters), f, &result);
        assign(f, node.target, std::move(result));
        return flow::normal;
      }
      case stmt_kind::macro: {
        const auto& node = static_cast<const macro_stmt&>(s);
        f->set(node.name, make_macro(macro_definition{node.name, &node.params, &node.body}, f));
        return flow::normal;
      }
      case stmt_kind::call_block:
        return exec_call_block(static_cast<const call_block_stmt&>(s), f, out);
      case stmt_kind::filter_block: {
        const auto& node = static_cast<const filter_block_stmt&>(s);
        std::string body;
        flow result = exec_body(node.body, f, body);
        value input(std::move(body));
        emit_value(out, apply_filter(static_cast<const filter_expr&>(*node.filters), f, &input));
        return result;
      }
      case stmt_kind::with: {
        const auto& node = static_cast<const with_stmt&>(s);
        auto inner = std::make_shared<frame>(f);
        std::vector<value> values;
        for (const auto& [target, e] : node.assignments)
          values.push_back(eval(*e, f));
        for (size_t i = 0; i < values.size(); ++i)
          assign(inner, node.assignments[i].first, std::move(values[i]));
        return exec_body(node.body, inner, out);
      }
      case stmt_kind::loop_control:
        return static_cast<const loop_control_stmt&>(s).is_break ? flow::break_loop : flow::continue_loop;
      case stmt_kind::expression:
        eval(*static_cast<const expression_stmt&>(s).expression, f);
        return flow::normal;
      case stmt_kind::block:
        return exec_body(static_cast<const block_stmt&>(s).body, f, out);
    }
    return flow::normal;
  }

  value make_macro(macro_definition def, const frame_ptr& closure) {
    captured_frames_.push_back(closure);
    return value::from_callable(std::make_shared<macro_callable>(*this, std::move(def), closure));
  }

  flow exec_for(const for_stmt& node, const frame_ptr& f, std::string& out) {
    std::vector<value> items = iterate(eval(*node.iterable, f), ctx_);
    if (node.condition) {
      // `for x in xs if cond` filters before the loop, so loop.length and loop.last see only the kept items.
      std::vector<value> kept;
      auto probe = std::make_shared<frame>(f);
      for (auto& item : items) {
        probe->clear();
        assign(probe, node.target, item);
        if (eval(*node.condition, probe).truthy())
          kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty())
      return exec_body(node.else_body, f, out);

    // One loop object per loop, updated in place like Jinja's LoopContext.
    const size_t n = items.size();
    auto position = std::make_shared<size_t>(0);
    auto last_changed = std::make_shared<std::optional<value>>();
    value loop = value::dict();
    dict_data& loop_data = loop.mutable_dict();
    loop_data.set(value("length"), value(n));
    loop_data.set(value("depth"), value(1));
    loop_data.set(value("depth0"), value(0));
    loop_data.set(value("cycle"), make_function("cycle", [position](render_context&, call_arguments& args) {
                    if (args.positional.empty())
                      throw value_error("no items for cycling given");
                    return args.positional[*position % args.positional.size()];
                  }));
    loop_data.set(value("changed"), make_function("changed", [last_changed](render_context&, call_arguments& args) {
                    value current = value::list(std::move(args.positional));
                    if (last_changed->has_value() && equals(**last_changed, current))
                      return value(false);
                    *last_changed = std::move(current);
                    return value(true);
                  }));
    for (size_t i = 0; i < n; ++i) {
      ctx_.charge(iteration_steps);
      *position = i;
      loop_data.set(value("index0"), value(i));
      loop_data.set(value("index"), value(i + 1));
      loop_data.set(value("revindex0"), value(n - i - 1));
      loop_data.set(value("revindex"), value(n - i));
      loop_data.set(value("first"), value(i == 0));
      loop_data.set(value("last"), value(i + 1 == n));
      loop_data.set(value("previtem"), i > 0 ? items[i - 1] : value::undefined("there is no previous item"));
      loop_data.set(value("nextitem"), i + 1 < n ? items[i + 1] : value::undefined("there is no next item"));
      auto body_frame = std::make_shared<frame>(f);
      assign(body_frame, node.target, items[i]);
      body_frame->set("loop", loop);
      if (exec_body(node.body, body_frame, out) == flow::break_loop)
        break;
    }
    return flow::normal;
  }

  flow exec_call_block(const call_block_stmt& node, const frame_ptr& f, std::string& out) {
    const auto& call = static_cast<const call_expr&>(*node.call);
    value caller = make_macro(macro_definition{"caller", &node.caller_params, &node.body}, f);
    value callee = eval(*call.callee, f);
    call_arguments args = eval_args(call.args, f);
    args.keyword.emplace_back("caller", std::move(caller));
    emit_value(out, invoke(callee, args));
    return flow::normal;
  }

  void assign(const frame_ptr& f, const assign_target& target, value v) {
    switch (target.kind) {
      case assign_target::kind_t::name:
        f->set(target.name, std::move(v));
        return;
      case assign_target::kind_t::attribute: {
        const value* ns = f->lookup(target.name);
        if (ns == nullptr || !ns->is_namespace())
          throw value_error("cannot assign attribute on non-namespace object '" + target.name + "'");
        ns->mutable_dict().set(value(target.attribute), std::move(v));
        return;
      }
      case assign_target::kind_t::tuple: {
        std::vector<value> items = iterate(v, ctx_);
        size_t expected = target.items.size();
        if (items.size() != expected)
          throw value_error(items.size() > expected
                                ? "too many values to unpack (expected " + std::to_string(expected) + ")"
                                : "not enough values to unpack (expected " + std::to_string(expected) + ", got " +
                                      std::to_string(items.size()) + ")");
        for (size_t i = 0; i < expected; ++i)
          assign(f, target.items[i], std::move(items[i]));
        return;
      }
    }
  }

  // ---- expressions ----

  value eval(const expr& e, const frame_ptr& f) {
    try {
      depth_guard guard(ctx_);
      ctx_.charge();
      value result = eval_node(e, f);
      // Strings are values: each result is a copy, so its size is work (a 60 MB string read in a loop is not free).
      if (result.is_string())
        ctx_.charge(result.as_string().size() / bytes_per_step);
      return result;
    } catch (const value_error& err) {
      throw template_error(err.kind(), name_, e.pos, err.what());
    }
  }

  value eval_node(const expr& e, const frame_ptr& f) {
    switch (e.kind) {
      case expr_kind::literal:
        return static_cast<const literal_expr&>(e).val;
      case expr_kind::name: {
        const auto& name = static_cast<const name_expr&>(e).name;
        if (const value* v = f->lookup(name))
          return *v;
        return value::undefined("'" + name + "' is undefined");
      }
      case expr_kind::list:
      case expr_kind::tuple: {
        const auto& node = static_cast<const sequence_expr&>(e);
        std::vector<value> items;
        items.reserve(node.items.size());
        for (const auto& item : node.items)
          items.push_back(eval(*item, f));
        return e.kind == expr_kind::list ? value::list(std::move(items)) : value::tuple(std::move(items));
      }
      case expr_kind::dict: {
        const auto& node = static_cast<const dict_expr&>(e);
        value d = value::dict();
        for (const auto& [key, item] : node.items) {
          value k = eval(*key, f);
          d.mutable_dict().set(std::move(k), eval(*item, f));
        }
        return d;
      }
      case expr_kind::attribute: {
        const auto& node = static_cast<const attribute_expr&>(e);
        return get_attribute(eval(*node.object, f), node.name);
      }
      case expr_kind::subscript: {
        const auto& node = static_cast<const subscript_expr&>(e);
        value object = eval(*node.object, f);
        return get_item(object, eval(*node.index, f));
      }
      case expr_kind::slice: {
        const auto& node = static_cast<const slice_expr&>(e);
        value object = eval(*node.object, f);
        value start = node.start ? eval(*node.start, f) : value();
        value stop = node.stop ? eval(*node.stop, f) : value();
        value step = node.step ? eval(*node.step, f) : value();
        return get_slice(object, start, stop, step);
      }
      case expr_kind::call:
        return eval_call(static_cast<const call_expr&>(e), f);
      case expr_kind::filter:
        return apply_filter(static_cast<const filter_expr&>(e), f, nullptr);
      case expr_kind::test: {
        const auto& node = static_cast<const test_expr&>(e);
        value subject = eval(*node.operand, f);
        call_arguments args = eval_args(node.args, f);
        return value(node.function(ctx_, subject, args) != node.negated);
      }
      case expr_kind::unary: {
        const auto& node = static_cast<const unary_expr&>(e);
        value operand = eval(*node.operand, f);
        if (node.op == unary_op::logical_not)
          return value(!operand.truthy());
        return apply_unary(node.op, operand);
      }
      case expr_kind::binary: {
        const auto& node = static_cast<const binary_expr&>(e);
        value lhs = eval(*node.lhs, f);
        // and/or return an operand, as in Python.
        if (node.op == binary_op::logical_and)
          return lhs.truthy() ? eval(*node.rhs, f) : lhs;
        if (node.op == binary_op::logical_or)
          return lhs.truthy() ? lhs : eval(*node.rhs, f);
        value rhs = eval(*node.rhs, f);
        return apply_binary(node.op, lhs, rhs, ctx_);
      }
      case expr_kind::compare: {
        const auto& node = static_cast<const compare_expr&>(e);
        value left = eval(*node.first, f);
        for (const auto& [op, operand] : node.rest) {
          value right = eval(*operand, f);
          if (!apply_compare(op, left, right))
            return value(false);
          left = std::move(right);
        }
        return value(true);
      }
      case expr_kind::conditional: {
        const auto& node = static_cast<const conditional_expr&>(e);
        if (eval(*node.condition, f).truthy())
          return eval(*node.then_expr, f);
        if (node.else_expr)
          return eval(*node.else_expr, f);
        return value::undefined("the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return value();
  }

  call_arguments eval_args(const argument_exprs& exprs, const frame_ptr& f) {
    call_arguments args;
    args.positional.reserve(exprs.positional.size());
    for (const auto& e : exprs.positional)
      args.positional.push_back(eval(*e, f));
    if (exprs.star_args) {
      for (auto& v : iterate(eval(*exprs.star_args, f), ctx_))
        args.positional.push_back(std::move(v));
    }
    for (const auto& [key, e] : exprs.keyword)
      args.keyword.emplace_back(key, eval(*e, f));
    if (exprs.star_kwargs) {
      value mapping = eval(*exprs.star_kwargs, f);
      if (!mapping.is_dict())
        throw value_error("argument after ** must be a mapping, not " + std::string(mapping.type_name()));
      for (const auto& [key, v] : mapping.as_dict().entries()) {
        if (!key.is_string())
          throw value_error("keywords must be strings");
        args.keyword.emplace_back(key.as_string(), v);
      }
    }
    return args;
  }

  value eval_call(const call_expr& node, const frame_ptr& f) {
    if (node.callee->kind == expr_kind::attribute) {
      // obj.method(...): call str/list/dict methods directly instead of binding them first.
      const auto& attr = static_cast<const attribute_expr&>(*node.callee);
      value object = eval(*attr.object, f);
      if (has_method(object, attr.name)) {
        call_arguments args = eval_args(node.args, f);
        return call_method(ctx_, object, attr.name, args);
      }
      value callee = get_attribute(object, attr.name);
      call_arguments args = eval_args(node.args, f);
      return invoke(callee, args);
    }
    value callee = eval(*node.callee, f);
    call_arguments args = eval_args(node.args, f);
    return invoke(callee, args);
  }

  value invoke(const value& callee, call_arguments& args) {
    if (callee.is_callable())
      return callee.as_callable().call(ctx_, args);
    if (callee.is_undefined())
      fail_undefined(callee);
    throw value_error("'" + std::string(callee.type_name()) + "' object is not callable");
  }

  // A filter node; in filter blocks and block sets the innermost operand is `block_input`.
  value apply_filter(const filter_expr& node, const frame_ptr& f, const value* block_input) {
    value subject;
    if (!node.operand)
      subject = block_input != nullptr ? *block_input : value();
    else if (block_input != nullptr && node.operand->kind == expr_kind::filter)
      subject = apply_filter(static_cast<const filter_expr&>(*node.operand), f, block_input);
    else
      subject = eval(*node.operand, f);
    call_arguments args = eval_args(node.args, f);
    return node.function(ctx_, subject, args);
  }

  const std::string& name_;
  render_context& ctx_;
  std::vector<frame_ptr> captured_frames_;
};

value macro_callable::call(render_context&, call_arguments& args) const {
  return renderer_.call_macro(def_, closure_, args);
}

}  // namespace

std::string render_statements(const stmt_list& body, const std::string& source_name, const value& variables,
                              render_context& ctx) {
  render_context::activation active(ctx);
  renderer r(source_name, ctx);
  return r.run(body, variables);
}

}  // namespace actorllm::text::jinja
