// The syntax tree the parser builds and the renderer walks. Nodes are plain structs tagged with a kind, so the
// renderer dispatches with one switch and the tree stays free of evaluation code.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/error.hpp"
#include "text/jinja/value.hpp"

namespace actorllm::text::jinja {

struct render_context;
struct call_arguments;

/// A builtin filter: `subject | name(args)`.
using filter_function = value (*)(render_context& ctx, const value& subject, call_arguments& args);
/// A builtin test: `subject is name(args)`.
using test_function = bool (*)(render_context& ctx, const value& subject, call_arguments& args);

// ---- expressions ----

enum class expr_kind : uint8_t {
  literal,
  name,
  list,
  tuple,
  dict,
  attribute,
  subscript,
  slice,
  call,
  filter,
  test,
  unary,
  binary,
  compare,
  conditional,
};

struct expr {
  expr(expr_kind k, source_pos p) : kind(k), pos(p) {}
  virtual ~expr() = default;
  expr_kind kind;
  source_pos pos;
};
using expr_ptr = std::unique_ptr<expr>;

struct literal_expr final : expr {
  literal_expr(source_pos p, value v) : expr(expr_kind::literal, p), val(std::move(v)) {}
  value val;
};

struct name_expr final : expr {
  name_expr(source_pos p, std::string n) : expr(expr_kind::name, p), name(std::move(n)) {}
  std::string name;
};

/// [a, b] or (a, b).
struct sequence_expr final : expr {
  sequence_expr(expr_kind k, source_pos p) : expr(k, p) {}
  std::vector<expr_ptr> items;
};

struct dict_expr final : expr {
  explicit dict_expr(source_pos p) : expr(expr_kind::dict, p) {}
  std::vector<std::pair<expr_ptr, expr_ptr>> items;
};

/// object.name
struct attribute_expr final : expr {
  attribute_expr(source_pos p, expr_ptr o, std::string n)
      : expr(expr_kind::attribute, p), object(std::move(o)), name(std::move(n)) {}
  expr_ptr object;
  std::string name;
};

/// object[index]
struct subscript_expr final : expr {
  subscript_expr(source_pos p, expr_ptr o, expr_ptr i)
      : expr(expr_kind::subscript, p), object(std::move(o)), index(std::move(i)) {}
  expr_ptr object;
  expr_ptr index;
};

/// object[start:stop:step]; absent parts are null.
struct slice_expr final : expr {
  slice_expr(source_pos p, expr_ptr o) : expr(expr_kind::slice, p), object(std::move(o)) {}
  expr_ptr object;
  expr_ptr start;
  expr_ptr stop;
  expr_ptr step;
};

/// Arguments as written at a call site.
struct argument_exprs {
  std::vector<expr_ptr> positional;
  std::vector<std::pair<std::string, expr_ptr>> keyword;
  expr_ptr star_args;    ///< *args
  expr_ptr star_kwargs;  ///< **kwargs
};

struct call_expr final : expr {
  call_expr(source_pos p, expr_ptr c) : expr(expr_kind::call, p), callee(std::move(c)) {}
  expr_ptr callee;
  argument_exprs args;
};

/// operand | name(args). In `{% filter %}` and `{% set x | f %}` blocks the innermost operand is null: it
/// stands for the rendered block.
struct filter_expr final : expr {
  filter_expr(source_pos p, expr_ptr o, std::string n, filter_function f)
      : expr(expr_kind::filter, p), operand(std::move(o)), name(std::move(n)), function(f) {}
  expr_ptr operand;
  std::string name;
  filter_function function;
  argument_exprs args;
};

/// operand is [not] name(args)
struct test_expr final : expr {
  test_expr(source_pos p, expr_ptr o, std::string n, test_function f, bool neg)
      : expr(expr_kind::test, p), operand(std::move(o)), name(std::move(n)), function(f), negated(neg) {}
  expr_ptr operand;
  std::string name;
  test_function function;
  bool negated;
  argument_exprs args;
};

enum class unary_op : uint8_t { logical_not, negate, plus };

struct unary_expr final : expr {
  unary_expr(source_pos p, unary_op o, expr_ptr e) : expr(expr_kind::unary, p), op(o), operand(std::move(e)) {}
  unary_op op;
  expr_ptr operand;
};

enum class binary_op : uint8_t {
  add,
  subtract,
  multiply,
  divide,
  floor_divide,
  modulo,
  power,
  concat,
  logical_and,
  logical_or
};

struct binary_expr final : expr {
  binary_expr(source_pos p, binary_op o, expr_ptr l, expr_ptr r)
      : expr(expr_kind::binary, p), op(o), lhs(std::move(l)), rhs(std::move(r)) {}
  binary_op op;
  expr_ptr lhs;
  expr_ptr rhs;
};

enum class compare_op : uint8_t { eq, ne, lt, le, gt, ge, in, not_in };

/// first op1 e1 op2 e2 ... (chained like Python's a < b < c).
struct compare_expr final : expr {
  compare_expr(source_pos p, expr_ptr f) : expr(expr_kind::compare, p), first(std::move(f)) {}
  expr_ptr first;
  std::vector<std::pair<compare_op, expr_ptr>> rest;
};

/// then_expr if condition else else_expr (else_expr may be null: Undefined).
struct conditional_expr final : expr {
  conditional_expr(source_pos p, expr_ptr c, expr_ptr t, expr_ptr e)
      : expr(expr_kind::conditional, p), condition(std::move(c)), then_expr(std::move(t)), else_expr(std::move(e)) {}
  expr_ptr condition;
  expr_ptr then_expr;
  expr_ptr else_expr;
};

// ---- statements ----

enum class stmt_kind : uint8_t {
  text,
  output,
  if_chain,
  for_loop,
  set,
  set_block,
  macro,
  call_block,
  filter_block,
  with,
  loop_control,
  expression,  ///< {% do expr %}
  block,       ///< a body rendered in place: {% generation %}
};

struct stmt {
  stmt(stmt_kind k, source_pos p) : kind(k), pos(p) {}
  virtual ~stmt() = default;
  stmt_kind kind;
  source_pos pos;
};
using stmt_ptr = std::unique_ptr<stmt>;
using stmt_list = std::vector<stmt_ptr>;

/// Where `set` and `for` store: a name, `ns.attr`, or a tuple of names.
struct assign_target {
  enum class kind_t : uint8_t { name, attribute, tuple };
  kind_t kind = kind_t::name;
  std::string name;                  ///< the name, or the namespace variable for attribute
  std::string attribute;             ///< for attribute
  std::vector<assign_target> items;  ///< for tuple
  source_pos pos;
};

struct text_stmt final : stmt {
  text_stmt(source_pos p, std::string t) : stmt(stmt_kind::text, p), text(std::move(t)) {}
  std::string text;
};

struct output_stmt final : stmt {
  output_stmt(source_pos p, expr_ptr e) : stmt(stmt_kind::output, p), expression(std::move(e)) {}
  expr_ptr expression;
};

struct if_stmt final : stmt {
  explicit if_stmt(source_pos p) : stmt(stmt_kind::if_chain, p) {}
  std::vector<std::pair<expr_ptr, stmt_list>> branches;  ///< if, then each elif
  stmt_list else_body;
};

struct for_stmt final : stmt {
  explicit for_stmt(source_pos p) : stmt(stmt_kind::for_loop, p) {}
  assign_target target;
  expr_ptr iterable;
  expr_ptr condition;  ///< `for x in y if cond`, may be null
  stmt_list body;
  stmt_list else_body;
};

struct set_stmt final : stmt {
  explicit set_stmt(source_pos p) : stmt(stmt_kind::set, p) {}
  assign_target target;
  expr_ptr value_expr;
};

/// {% set x | filters %}body{% endset %}
struct set_block_stmt final : stmt {
  explicit set_block_stmt(source_pos p) : stmt(stmt_kind::set_block, p) {}
  assign_target target;
  expr_ptr filters;  ///< filter chain applied to the body, may be null
  stmt_list body;
};

struct macro_param {
  std::string name;
  expr_ptr default_value;  ///< may be null
};

struct macro_stmt final : stmt {
  explicit macro_stmt(source_pos p) : stmt(stmt_kind::macro, p) {}
  std::string name;
  std::vector<macro_param> params;
  stmt_list body;
};

/// {% call(params) macro(args) %}body{% endcall %}: calls the macro with `caller` bound to the body.
struct call_block_stmt final : stmt {
  explicit call_block_stmt(source_pos p) : stmt(stmt_kind::call_block, p) {}
  std::vector<macro_param> caller_params;
  expr_ptr call;  ///< a call_expr
  stmt_list body;
};

struct filter_block_stmt final : stmt {
  explicit filter_block_stmt(source_pos p) : stmt(stmt_kind::filter_block, p) {}
  expr_ptr filters;
  stmt_list body;
};

struct with_stmt final : stmt {
  explicit with_stmt(source_pos p) : stmt(stmt_kind::with, p) {}
  std::vector<std::pair<assign_target, expr_ptr>> assignments;
  stmt_list body;
};

struct loop_control_stmt final : stmt {
  loop_control_stmt(source_pos p, bool b) : stmt(stmt_kind::loop_control, p), is_break(b) {}
  bool is_break;
};

struct expression_stmt final : stmt {
  expression_stmt(source_pos p, expr_ptr e) : stmt(stmt_kind::expression, p), expression(std::move(e)) {}
  expr_ptr expression;
};

struct block_stmt final : stmt {
  explicit block_stmt(source_pos p) : stmt(stmt_kind::block, p) {}
  stmt_list body;
};

}  // namespace actorllm::text::jinja
