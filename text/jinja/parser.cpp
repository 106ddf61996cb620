// Recursive-descent parser for the Jinja subset.
#include "text/jinja/parser.hpp"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include "text/jinja/filters.hpp"
#include "text/jinja/tests.hpp"

namespace actorllm::text::jinja {
namespace {

// Nesting of statements and expressions the parser accepts: deep enough for any real template, shallow enough
// that parsing and rendering stay far from the end of the stack.
constexpr int max_nesting = 256;

class parser {
 public:
  parser(std::vector<token> tokens, const std::string& name) : tokens_(std::move(tokens)), name_(name) {}

  stmt_list run() {
    stmt_list body = parse_body({});
    return body;
  }

 private:
  // An open block, for messages about mismatched end tags.
  struct open_block {
    std::string tag;
    std::vector<std::string_view> ends;
    source_pos pos;
  };

  class nesting_guard {
   public:
    nesting_guard(parser& p, source_pos pos) : p_(p) {
      if (++p_.depth_ > max_nesting)
        p_.fail(pos, "template nested too deeply (more than " + std::to_string(max_nesting) + " levels)");
    }
    ~nesting_guard() { --p_.depth_; }
    nesting_guard(const nesting_guard&) = delete;
    nesting_guard& operator=(const nesting_guard&) = delete;

   private:
    parser& p_;
  };

  // Counts the links of a chain built in a loop (a + b + c, x.a.b, x | f | g) as nesting too: the tree such a
  // chain builds is as deep as the chain is long, and the renderer and the destructors walk it recursively.
  class chain_guard {
   public:
    explicit chain_guard(parser& p) : p_(p) {}
    ~chain_guard() { p_.depth_ -= links_; }
    chain_guard(const chain_guard&) = delete;
    chain_guard& operator=(const chain_guard&) = delete;
    void link(source_pos pos) {
      ++links_;
      if (++p_.depth_ > max_nesting)
        p_.fail(pos, "expression nested too deeply (more than " + std::to_string(max_nesting) + " levels)");
    }

   private:
    parser& p_;
    int links_ = 0;
  };

  // ---- token helpers ----

  const token& current() const { return tokens_[pos_]; }
  const token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const token& advance() {
    const token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size())
      ++pos_;
    return t;
  }
  bool at_op(std::string_view op) const { return current().kind == token_kind::op && current().text == op; }
  bool at_name(std::string_view n) const { return current().kind == token_kind::name && current().text == n; }
  static bool is_op(const token& t, std::string_view op) { return t.kind == token_kind::op && t.text == op; }
  static bool is_name(const token& t, std::string_view n) { return t.kind == token_kind::name && t.text == n; }

  [[noreturn]] void fail(source_pos pos, std::string message) const {
    throw template_error(error_kind::syntax, name_, pos, std::move(message));
  }
  [[noreturn]] void unexpected(const token& t, std::string_view expected = {}) const {
    std::string message = "unexpected token " + describe(t);
    if (!expected.empty())
      message += ", expected " + std::string(expected);
    fail(t.pos, std::move(message));
  }

  void expect_op(std::string_view op) {
    if (!at_op(op))
      unexpected(current(), "'" + std::string(op) + "'");
    advance();
  }
  void expect_name(std::string_view n) {
    if (!at_name(n))
      unexpected(current(), "'" + std::string(n) + "'");
    advance();
  }
  std::string expect_identifier() {
    if (current().kind != token_kind::name)
      unexpected(current(), "a name");
    return advance().text;
  }
  void expect_block_end() {
    if (current().kind != token_kind::block_end)
      unexpected(current(), "end of statement '%}'");
    advance();
  }

  // ---- statements ----

  // Parses until a block tag whose name is in `ends` (left current, on that name) or the end of the template.
  stmt_list parse_body(std::vector<std::string_view> ends) {
    stmt_list body;
    while (true) {
      const token& t = current();
      switch (t.kind) {
        case token_kind::text:
          body.push_back(std::make_unique<text_stmt>(t.pos, t.text));
          advance();
          break;
        case token_kind::variable_begin: {
          advance();
          expr_ptr e = parse_tuple(true, false);
          if (current().kind != token_kind::variable_end)
            unexpected(current(), "end of print statement '}}'");
          advance();
          body.push_back(std::make_unique<output_stmt>(t.pos, std::move(e)));
          break;
        }
        case token_kind::block_begin: {
          const token& tag = peek();
          if (tag.kind == token_kind::name && std::find(ends.begin(), ends.end(), tag.text) != ends.end()) {
            advance();  // leave current on the end tag's name
            return body;
          }
          body.push_back(parse_statement());
          break;
        }
        case token_kind::eof:
          if (!ends.empty()) {
            const open_block& open = blocks_.back();
            fail(t.pos, "unexpected end of template, expected '" + std::string(open.ends.back()) + "' to close the '" +
                            open.tag + "' at " + std::to_string(open.pos.line) + ":" + std::to_string(open.pos.column));
          }
          return body;
        default:
          unexpected(t);
      }
    }
  }

  // Body of a block statement up to one of `ends`; pushes the block for error messages.
  stmt_list parse_block_body(const std::string& tag, source_pos pos, std::vector<std::string_view> ends) {
    blocks_.push_back(open_block{tag, ends, pos});
    stmt_list body = parse_body(std::move(ends));
    blocks_.pop_back();
    return body;
  }

  // After parse_block_body returned on `name`: consumes `name %}`.
  void close_tag(std::string_view name) {
    expect_name(name);
    expect_block_end();
  }

  stmt_ptr parse_statement() {
    const token& begin = advance();  // {%
    nesting_guard guard(*this, begin.pos);
    const token& tag = current();
    if (tag.kind != token_kind::name)
      unexpected(tag, "a statement name");
    const std::string& name = tag.text;
    if (name == "for")
      return parse_for();
    if (name == "if")
      return parse_if();
    if (name == "set")
      return parse_set();
    if (name == "macro")
      return parse_macro();
    if (name == "call")
      return parse_call_block();
    if (name == "filter")
      return parse_filter_block();
    if (name == "with")
      return parse_with();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0)
        fail(tag.pos, "'" + name + "' outside of a loop");
      auto node = std::make_unique<loop_control_stmt>(tag.pos, name == "break");
      advance();
      expect_block_end();
      return node;
    }
    if (name == "do") {
      source_pos pos = advance().pos;
      auto node = std::make_unique<expression_stmt>(pos, parse_tuple(true, false));
      expect_block_end();
      return node;
    }
    if (name == "generation") {
      auto node = std::make_unique<block_stmt>(advance().pos);
      expect_block_end();
      node->body = parse_block_body("generation", node->pos, {"endgeneration"});
      close_tag("endgeneration");
      return node;
    }
    static constexpr std::string_view unsupported[] = {"extends", "include",    "import", "from",
                                                       "block",   "autoescape", "trans"};
    if (std::find(std::begin(unsupported), std::end(unsupported), name) != std::end(unsupported))
      fail(tag.pos, "'" + name + "' tags are not supported in chat templates");
    std::string message = "unexpected token '" + name + "'";
    if (!blocks_.empty()) {
      const open_block& open = blocks_.back();
      message += ", expected '" + std::string(open.ends.back()) + "' to close the '" + open.tag + "' at " +
                 std::to_string(open.pos.line) + ":" + std::to_string(open.pos.column);
    }
    fail(tag.pos, std::move(message));
  }

  stmt_ptr parse_for() {
    auto node = std::make_unique<for_stmt>(advance().pos);
    node->target = parse_assign_target(false, true);
    expect_name("in");
    node->iterable = parse_tuple(false, false, "recursive");
    if (at_name("if")) {
      advance();
      node->condition = parse_expression(true);
    }
    if (at_name("recursive"))
      fail(current().pos, "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    node->body = parse_block_body("for", node->pos, {"else", "endfor"});
    --loop_depth_;
    if (at_name("else")) {
      advance();
      expect_block_end();
      node->else_body = parse_block_body("for", node->pos, {"endfor"});
    }
    close_tag("endfor");
    return node;
  }

  stmt_ptr parse_if() {
    auto node = std::make_unique<if_stmt>(advance().pos);
    expr_ptr condition = parse_tuple(false, false);
    expect_block_end();
    while (true) {
      stmt_list body = parse_block_body("if", node->pos, {"elif", "else", "endif"});
      node->branches.emplace_back(std::move(condition), std::move(body));
      if (at_name("elif")) {
        advance();
        condition = parse_tuple(false, false);
        expect_block_end();
        continue;
      }
      break;
    }
    if (at_name("else")) {
      advance();
      expect_block_end();
      node->else_body = parse_block_body("if", node->pos, {"endif"});
    }
    close_tag("endif");
    return node;
  }

  stmt_ptr parse_set() {
    source_pos pos = advance().pos;
    assign_target target = parse_assign_target(true, true);
    if (at_op("=")) {
      advance();
      auto node = std::make_unique<set_stmt>(pos);
      node->target = std::move(target);
      node->value_expr = parse_tuple(true, false);
      expect_block_end();
      return node;
    }
    auto node = std::make_unique<set_block_stmt>(pos);
    node->target = std::move(target);
    if (node->target.kind == assign_target::kind_t::tuple)
      fail(pos, "a block set cannot assign to a tuple");
    if (at_op("|"))
      node->filters = parse_filter_chain(nullptr);
    expect_block_end();
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = parse_block_body("set", pos, {"endset"});
    loop_depth_ = saved_loop_depth;
    close_tag("endset");
    return node;
  }

  std::vector<macro_param> parse_params() {
    std::vector<macro_param> params;
    expect_op("(");
    while (!at_op(")")) {
      if (!params.empty())
        expect_op(",");
      if (at_op(")"))
        break;
      macro_param param;
      source_pos pos = current().pos;
      param.name = expect_identifier();
      check_assignable(param.name, pos);
      if (at_op("=")) {
        advance();
        param.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        fail(pos, "non-default argument '" + param.name + "' follows default argument");
      }
      params.push_back(std::move(param));
    }
    advance();
    return params;
  }

  stmt_ptr parse_macro() {
    auto node = std::make_unique<macro_stmt>(advance().pos);
    source_pos name_pos = current().pos;
    node->name = expect_identifier();
    check_assignable(node->name, name_pos);
    node->params = parse_params();
    expect_block_end();
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = parse_block_body("macro", node->pos, {"endmacro"});
    loop_depth_ = saved_loop_depth;
    close_tag("endmacro");
    return node;
  }

  stmt_ptr parse_call_block() {
    auto node = std::make_unique<call_block_stmt>(advance().pos);
    if (at_op("("))
      node->caller_params = parse_params();
    node->call = parse_expression(true);
    if (node->call->kind != expr_kind::call)
      fail(node->call->pos, "expected a call after 'call'");
    expect_block_end();
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = parse_block_body("call", node->pos, {"endcall"});
    loop_depth_ = saved_loop_depth;
    close_tag("endcall");
    return node;
  }

  stmt_ptr parse_filter_block() {
    auto node = std::make_unique<filter_block_stmt>(advance().pos);
    node->filters = parse_filter_chain(nullptr, false);
    expect_block_end();
    node->body = parse_block_body("filter", node->pos, {"endfilter"});
    close_tag("endfilter");
    return node;
  }

  stmt_ptr parse_with() {
    auto node = std::make_unique<with_stmt>(advance().pos);
    while (current().kind != token_kind::block_end) {
      if (!node->assignments.empty())
        expect_op(",");
      assign_target target = parse_assign_target(false, false);
      expect_op("=");
      node->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    node->body = parse_block_body("with", node->pos, {"endwith"});
    close_tag("endwith");
    return node;
  }

  void check_assignable(const std::string& name, source_pos pos) const {
    static constexpr std::string_view constants[] = {"true", "false", "none", "True", "False", "None"};
    if (std::find(std::begin(constants), std::end(constants), name) != std::end(constants))
      fail(pos, "cannot assign to '" + name + "'");
  }

  // A name, `ns.attr` (when allowed) or a tuple of names, optionally in parentheses.
  assign_target parse_assign_target(bool allow_attribute, bool allow_tuple) {
    assign_target target;
    target.pos = current().pos;
    if (allow_tuple && at_op("(")) {
      advance();
      target = parse_assign_target(false, true);
      expect_op(")");
      return target;
    }
    target.name = expect_identifier();
    check_assignable(target.name, target.pos);
    if (allow_attribute && at_op(".")) {
      advance();
      target.kind = assign_target::kind_t::attribute;
      target.attribute = expect_identifier();
      return target;
    }
    if (!allow_tuple || !at_op(","))
      return target;
    assign_target tuple;
    tuple.kind = assign_target::kind_t::tuple;
    tuple.pos = target.pos;
    tuple.items.push_back(std::move(target));
    while (at_op(",")) {
      advance();
      if (current().kind != token_kind::name)
        break;
      assign_target item;
      item.pos = current().pos;
      item.name = advance().text;
      check_assignable(item.name, item.pos);
      tuple.items.push_back(std::move(item));
    }
    return tuple;
  }

  // ---- expressions ----

  expr_ptr parse_expression(bool with_condexpr) {
    nesting_guard guard(*this, current().pos);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  // Comma-separated expressions: one expression, or a tuple when there is a comma. `end_name` is an extra name
  // that ends the list (`recursive` after a for loop's iterable).
  expr_ptr parse_tuple(bool with_condexpr, bool explicit_parentheses, std::string_view end_name = {}) {
    source_pos pos = current().pos;
    std::vector<expr_ptr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty())
        expect_op(",");
      const token& t = current();
      if (t.kind == token_kind::variable_end || t.kind == token_kind::block_end || is_op(t, ")") ||
          (!end_name.empty() && is_name(t, end_name)))
        break;
      items.push_back(parse_expression(with_condexpr));
      if (!at_op(","))
        break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty())
        return std::move(items.front());
      if (!explicit_parentheses)
        unexpected(current(), "an expression");
    }
    auto node = std::make_unique<sequence_expr>(expr_kind::tuple, pos);
    node->items = std::move(items);
    return node;
  }

  expr_ptr parse_condexpr() {
    expr_ptr e = parse_or();
    chain_guard chain(*this);
    while (at_name("if")) {
      source_pos pos = advance().pos;
      chain.link(pos);
      expr_ptr condition = parse_or();
      expr_ptr otherwise;
      if (at_name("else")) {
        advance();
        otherwise = parse_expression(true);
      }
      e = std::make_unique<conditional_expr>(pos, std::move(condition), std::move(e), std::move(otherwise));
    }
    return e;
  }

  expr_ptr parse_or() {
    expr_ptr left = parse_and();
    chain_guard chain(*this);
    while (at_name("or")) {
      source_pos pos = advance().pos;
      chain.link(pos);
      left = std::make_unique<binary_expr>(pos, binary_op::logical_or, std::move(left), parse_and());
    }
    return left;
  }

  expr_ptr parse_and() {
    expr_ptr left = parse_not();
    chain_guard chain(*this);
    while (at_name("and")) {
      source_pos pos = advance().pos;
      chain.link(pos);
      left = std::make_unique<binary_expr>(pos, binary_op::logical_and, std::move(left), parse_not());
    }
    return left;
  }

  expr_ptr parse_not() {
    if (at_name("not")) {
      source_pos pos = advance().pos;
      nesting_guard guard(*this, pos);
      return std::make_unique<unary_expr>(pos, unary_op::logical_not, parse_not());
    }
    return parse_compare();
  }

  expr_ptr parse_compare() {
    source_pos pos = current().pos;
    expr_ptr first = parse_math1();
    std::unique_ptr<compare_expr> node;
    while (true) {
      compare_op op;
      const token& t = current();
      if (t.kind == token_kind::op && t.text == "==") {
        op = compare_op::eq;
      } else if (t.kind == token_kind::op && t.text == "!=") {
        op = compare_op::ne;
      } else if (t.kind == token_kind::op && t.text == "<") {
        op = compare_op::lt;
      } else if (t.kind == token_kind::op && t.text == "<=") {
        op = compare_op::le;
      } else if (t.kind == token_kind::op && t.text == ">") {
        op = compare_op::gt;
      } else if (t.kind == token_kind::op && t.text == ">=") {
        op = compare_op::ge;
      } else if (is_name(t, "in")) {
        op = compare_op::in;
      } else if (is_name(t, "not") && is_name(peek(), "in")) {
        advance();
        op = compare_op::not_in;
      } else {
        break;
      }
      advance();
      if (!node)
        node = std::make_unique<compare_expr>(pos, std::move(first));
      node->rest.emplace_back(op, parse_math1());
    }
    if (node)
      return node;
    return first;
  }

  expr_ptr parse_math1() {
    expr_ptr left = parse_concat();
    chain_guard chain(*this);
    while (at_op("+") || at_op("-")) {
      const token& t = advance();
      chain.link(t.pos);
      left = std::make_unique<binary_expr>(t.pos, t.text == "+" ? binary_op::add : binary_op::subtract, std::move(left),
                                           parse_concat());
    }
    return left;
  }

  expr_ptr parse_concat() {
    expr_ptr left = parse_math2();
    chain_guard chain(*this);
    while (at_op("~")) {
      source_pos pos = advance().pos;
      chain.link(pos);
      left = std::make_unique<binary_expr>(pos, binary_op::concat, std::move(left), parse_math2());
    }
    return left;
  }

  expr_ptr parse_math2() {
    expr_ptr left = parse_pow();
    chain_guard chain(*this);
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const token& t = advance();
      chain.link(t.pos);
      binary_op op = t.text == "*"    ? binary_op::multiply
                     : t.text == "/"  ? binary_op::divide
                     : t.text == "//" ? binary_op::floor_divide
                                      : binary_op::modulo;
      left = std::make_unique<binary_expr>(t.pos, op, std::move(left), parse_pow());
    }
    return left;
  }

  expr_ptr parse_pow() {
    expr_ptr left = parse_unary(true);
    chain_guard chain(*this);
    while (at_op("**")) {
      source_pos pos = advance().pos;
      chain.link(pos);
      left = std::make_unique<binary_expr>(pos, binary_op::power, std::move(left), parse_unary(true));
    }
    return left;
  }

  expr_ptr parse_unary(bool with_filter) {
    nesting_guard guard(*this, current().pos);
    expr_ptr node;
    if (at_op("-") || at_op("+")) {
      const token& t = advance();
      node = std::make_unique<unary_expr>(t.pos, t.text == "-" ? unary_op::negate : unary_op::plus, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter)
      node = parse_filter_expr(std::move(node));
    return node;
  }

  expr_ptr parse_primary() {
    const token& t = current();
    switch (t.kind) {
      case token_kind::name: {
        advance();
        if (t.text == "true" || t.text == "True")
          return std::make_unique<literal_expr>(t.pos, value(true));
        if (t.text == "false" || t.text == "False")
          return std::make_unique<literal_expr>(t.pos, value(false));
        if (t.text == "none" || t.text == "None")
          return std::make_unique<literal_expr>(t.pos, value::none());
        return std::make_unique<name_expr>(t.pos, t.text);
      }
      case token_kind::string: {
        std::string s = advance().text;
        // Adjacent string literals concatenate, as in Python.
        while (current().kind == token_kind::string)
          s += advance().text;
        return std::make_unique<literal_expr>(t.pos, value(std::move(s)));
      }
      case token_kind::integer:
        advance();
        return std::make_unique<literal_expr>(t.pos, value(std::stoll(t.text)));
      case token_kind::floating:
        advance();
        // strtod, unlike stod, gives inf for 1e999 as Python's float() does.
        return std::make_unique<literal_expr>(t.pos, value(std::strtod(t.text.c_str(), nullptr)));
      case token_kind::op:
        if (t.text == "(") {
          advance();
          expr_ptr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[")
          return parse_list();
        if (t.text == "{")
          return parse_dict();
        break;
      default:
        break;
    }
    unexpected(t);
  }

  expr_ptr parse_list() {
    auto node = std::make_unique<sequence_expr>(expr_kind::list, advance().pos);
    while (!at_op("]")) {
      if (!node->items.empty())
        expect_op(",");
      if (at_op("]"))
        break;
      node->items.push_back(parse_expression(true));
    }
    advance();
    return node;
  }

  expr_ptr parse_dict() {
    auto node = std::make_unique<dict_expr>(advance().pos);
    while (!at_op("}")) {
      if (!node->items.empty())
        expect_op(",");
      if (at_op("}"))
        break;
      expr_ptr key = parse_expression(true);
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression(true));
    }
    advance();
    return node;
  }

  expr_ptr parse_postfix(expr_ptr node) {
    chain_guard chain(*this);
    while (true) {
      if (at_op(".") || at_op("[") || at_op("("))
        chain.link(current().pos);
      if (at_op(".")) {
        source_pos pos = advance().pos;
        const token& t = current();
        if (t.kind == token_kind::name) {
          node = std::make_unique<attribute_expr>(pos, std::move(node), advance().text);
        } else if (t.kind == token_kind::integer) {
          advance();
          node = std::make_unique<subscript_expr>(pos, std::move(node),
                                                  std::make_unique<literal_expr>(t.pos, value(std::stoll(t.text))));
        } else {
          unexpected(t, "an attribute name");
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  expr_ptr parse_subscript(expr_ptr object) {
    source_pos pos = advance().pos;  // [
    expr_ptr start;
    if (!at_op(":"))
      start = parse_expression(true);
    if (!at_op(":")) {
      if (at_op(","))
        fail(current().pos, "tuple subscripts are not supported");
      expect_op("]");
      return std::make_unique<subscript_expr>(pos, std::move(object), std::move(start));
    }
    auto node = std::make_unique<slice_expr>(pos, std::move(object));
    node->start = std::move(start);
    advance();  // :
    if (!at_op("]") && !at_op(":"))
      node->stop = parse_expression(true);
    if (at_op(":")) {
      advance();
      if (!at_op("]"))
        node->step = parse_expression(true);
    }
    expect_op("]");
    return node;
  }

  argument_exprs parse_call_args() {
    argument_exprs args;
    expect_op("(");
    bool need_comma = false;
    while (!at_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (at_op(")"))
          break;
      }
      if (at_op("*")) {
        advance();
        args.star_args = parse_expression(true);
      } else if (at_op("**")) {
        advance();
        args.star_kwargs = parse_expression(true);
      } else if (current().kind == token_kind::name && is_op(peek(), "=")) {
        source_pos pos = current().pos;
        std::string key = advance().text;
        advance();
        for (const auto& [existing, unused] : args.keyword)
          if (existing == key)
            fail(pos, "keyword argument '" + key + "' repeated");
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty() || args.star_args || args.star_kwargs)
          fail(current().pos, "positional argument follows keyword argument");
        args.positional.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    advance();
    return args;
  }

  expr_ptr parse_call(expr_ptr callee) {
    source_pos pos = current().pos;
    auto node = std::make_unique<call_expr>(pos, std::move(callee));
    node->args = parse_call_args();
    return node;
  }

  expr_ptr parse_filter_expr(expr_ptr node) {
    chain_guard chain(*this);
    while (true) {
      if (at_op("|") || at_name("is") || at_op("("))
        chain.link(current().pos);
      if (at_op("|"))
        node = parse_filter_chain(std::move(node), true);
      else if (at_name("is"))
        node = parse_test(std::move(node));
      else if (at_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  // `| f(args) | g ...` applied to `operand` (null inside filter blocks). With `single`, parses one filter.
  expr_ptr parse_filter_chain(expr_ptr operand, bool single = false) {
    bool first = true;
    chain_guard chain(*this);
    do {
      chain.link(current().pos);
      if (!first || at_op("|"))
        expect_op("|");
      first = false;
      source_pos pos = current().pos;
      std::string name = expect_identifier();
      while (at_op(".")) {
        advance();
        name += '.';
        name += expect_identifier();
      }
      filter_function fn = find_filter(name);
      if (fn == nullptr)
        fail(pos, "no filter named '" + name + "'");
      auto node = std::make_unique<filter_expr>(pos, std::move(operand), name, fn);
      if (at_op("("))
        node->args = parse_call_args();
      operand = std::move(node);
    } while (!single && at_op("|"));
    return operand;
  }

  expr_ptr parse_test(expr_ptr operand) {
    source_pos pos = advance().pos;  // is
    bool negated = false;
    if (at_name("not")) {
      advance();
      negated = true;
    }
    source_pos name_pos = current().pos;
    std::string name = expect_identifier();
    while (at_op(".")) {
      advance();
      name += '.';
      name += expect_identifier();
    }
    test_function fn = find_test(name);
    if (fn == nullptr)
      fail(name_pos, "no test named '" + name + "'");
    auto node = std::make_unique<test_expr>(pos, std::move(operand), name, fn, negated);
    const token& t = current();
    if (at_op("(")) {
      node->args = parse_call_args();
    } else if ((t.kind == token_kind::name || t.kind == token_kind::string || t.kind == token_kind::integer ||
                t.kind == token_kind::floating || is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
      if (is_name(t, "is"))
        fail(t.pos, "you cannot chain multiple tests with 'is'");
      nesting_guard guard(*this, t.pos);
      node->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return node;
  }

  std::vector<token> tokens_;
  const std::string& name_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<open_block> blocks_;
};

}  // namespace

stmt_list parse_tokens(std::vector<token> tokens, const std::string& source_name) {
  return parser(std::move(tokens), source_name).run();
}

}  // namespace actorllm::text::jinja
