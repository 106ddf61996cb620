// Regex -> syntax tree -> Thompson NFA -> subset construction -> pruned DFA. Exceptions (regex_error) only while
// compiling.
#include "text/structured/byte_dfa.hpp"
#include "util/hex.hpp"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>

namespace actorllm::text::structured {

namespace {

using byte_set = std::bitset<256>;

struct node {
  enum kind_t { set, concat, alt, repeat, empty } kind = empty;
  byte_set bytes;                            // set
  std::vector<std::unique_ptr<node>> parts;  // concat, alt; repeat: one
  int min = 0, max = -1;                     // repeat; max -1: unbounded
};
using node_ptr = std::unique_ptr<node>;

constexpr int max_repeat = 1000;

node_ptr make(node::kind_t k) {
  auto n = std::make_unique<node>();
  n->kind = k;
  return n;
}

node_ptr make_set(const byte_set& b) {
  auto n = make(node::set);
  n->bytes = b;
  return n;
}

byte_set range(int lo, int hi) {
  byte_set b;
  for (int c = lo; c <= hi; ++c)
    b.set(static_cast<std::size_t>(c));
  return b;
}

byte_set digit() { return range('0', '9'); }
byte_set word() { return range('a', 'z') | range('A', 'Z') | digit() | range('_', '_'); }
// What wildcards (`.`, negated classes, \D \W \S) stand for: printable ASCII without '"' and '\\', so that a
// pattern embedded in a JSON string can never end the string or start an escape, nor emit control bytes or broken
// UTF-8. A pattern that wants those characters writes them literally.
byte_set universe() {
  byte_set b = range(0x20, 0x7E);
  b.reset('"');
  b.reset('\\');
  return b;
}

byte_set space() {
  byte_set b;
  for (char c : std::string_view{" \t\n\r\f\v"})
    b.set(static_cast<unsigned char>(c));
  return b;
}

class parser {
 public:
  explicit parser(std::string_view p) : p_(p) {}

  node_ptr parse() {
    if (at('^'))
      ++i_;
    node_ptr n = alternation();
    if (i_ < p_.size())
      fail(p_[i_] == ')' ? "an unbalanced ')'" : "an unexpected character");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw regex_error("regex: " + what + " at offset " + std::to_string(i_) + " of '" + std::string{p_} + "'");
  }
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }

  node_ptr alternation() {
    auto first = sequence();
    if (!at('|'))
      return first;
    auto a = make(node::alt);
    a->parts.push_back(std::move(first));
    while (at('|')) {
      ++i_;
      a->parts.push_back(sequence());
    }
    return a;
  }

  node_ptr sequence() {
    auto s = make(node::concat);
    while (i_ < p_.size() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      auto a = atom();
      s->parts.push_back(quantified(std::move(a)));
    }
    return s;
  }

  int number() {
    std::size_t start = i_;
    long v = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_] - '0');
      if (v > max_repeat)
        fail("a repetition count over " + std::to_string(max_repeat));
      ++i_;
    }
    if (i_ == start)
      fail("a repetition without a number");
    return static_cast<int>(v);
  }

  node_ptr quantified(node_ptr a) {
    for (;;) {
      int lo = 0, hi = -1;
      if (at('*')) {
        ++i_;
      } else if (at('+')) {
        ++i_;
        lo = 1;
      } else if (at('?')) {
        ++i_;
        hi = 1;
      } else if (at('{') && i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9') {
        ++i_;
        lo = number();
        hi = lo;
        if (at(',')) {
          ++i_;
          hi = at('}') ? -1 : number();
        }
        if (!at('}'))
          fail("an unterminated {n,m}");
        ++i_;
        if (hi >= 0 && hi < lo)
          fail("{n,m} with m < n");
      } else {
        return a;
      }
      if (at('?') || at('+'))  // lazy or possessive: the same language
        ++i_;
      auto r = make(node::repeat);
      r->parts.push_back(std::move(a));
      r->min = lo;
      r->max = hi;
      a = std::move(r);
    }
  }

  int hex_digit(char c) {
    const int v = hex_digit_value(c);
    if (v < 0)
      fail("a bad hex digit");
    return v;
  }

  // An escape after '\' (i_ at the escaped character): its byte set.
  byte_set escape(bool in_class) {
    if (i_ >= p_.size())
      fail("a trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return digit();
      case 'D':
        return universe() & ~digit();
      case 'w':
        return word();
      case 'W':
        return universe() & ~word();
      case 's':
        return space();
      case 'S':
        return universe() & ~space();
      case 'n':
        return range('\n', '\n');
      case 't':
        return range('\t', '\t');
      case 'r':
        return range('\r', '\r');
      case 'f':
        return range('\f', '\f');
      case 'v':
        return range('\v', '\v');
      case '0':
        return range(0, 0);
      case 'x': {
        if (i_ + 2 > p_.size())
          fail("a short \\x escape");
        int v = hex_digit(p_[i_]) * 16 + hex_digit(p_[i_ + 1]);
        i_ += 2;
        return range(v, v);
      }
      case 'b':
      case 'B':
        if (!in_class)
          fail("a word boundary (\\b), which is not supported");
        return range('\b', '\b');
      default:
        if ((c >= '1' && c <= '9') || c == 'k')
          fail("a backreference, which is not supported");
        if (c == 'p' || c == 'P')
          fail("a Unicode property class (\\p), which is not supported");
        if (c == 'u')
          fail("a \\u escape, which is not supported (write the character itself)");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          fail(std::string{"an unknown escape \\"} + c);
        return range(static_cast<unsigned char>(c), static_cast<unsigned char>(c));
    }
  }

  node_ptr char_class() {
    ++i_;  // '['
    bool negate = false;
    if (at('^')) {
      negate = true;
      ++i_;
    }
    byte_set b;
    bool first = true;
    while (i_ < p_.size() && (!at(']') || first)) {
      first = false;
      byte_set one;
      int lo = -1;
      if (at('[') && i_ + 1 < p_.size() && p_[i_ + 1] == ':')
        fail("a POSIX class ([:alpha:]), which is not supported");
      if (at('\\')) {
        ++i_;
        one = escape(true);
        if (one.count() == 1)
          for (int c = 0; c < 256; ++c)
            if (one.test(static_cast<std::size_t>(c)))
              lo = c;
      } else {
        lo = static_cast<unsigned char>(p_[i_++]);
        one.set(static_cast<std::size_t>(lo));
      }
      if (lo >= 0 && at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        int hi = 0;
        if (at('\\')) {
          ++i_;
          byte_set h = escape(true);
          if (h.count() != 1)
            fail("a class range ending in a class");
          for (int c = 0; c < 256; ++c)
            if (h.test(static_cast<std::size_t>(c)))
              hi = c;
        } else {
          hi = static_cast<unsigned char>(p_[i_++]);
        }
        if (hi < lo)
          fail("a reversed class range");
        one = range(lo, hi);
      }
      b |= one;
    }
    if (!at(']'))
      fail("an unterminated character class");
    ++i_;
    if (negate)
      b = universe() & ~b;
    return make_set(b);
  }

  node_ptr atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (at('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':')
          i_ += 2;
        else if (i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!' || p_[i_ + 1] == '<'))
          fail("a lookaround or named group, which is not supported");
        else
          fail("an unknown group modifier");
      }
      auto inner = alternation();
      if (!at(')'))
        fail("an unterminated group");
      ++i_;
      return inner;
    }
    if (c == '[')
      return char_class();
    if (c == '.') {
      ++i_;
      return make_set(universe());
    }
    if (c == '\\') {
      ++i_;
      return make_set(escape(false));
    }
    if (c == '*' || c == '+' || c == '?')
      fail("a quantifier with nothing before it");
    if (c == '^')
      fail("a '^' anchor inside the pattern, which is not supported");
    if (c == '$')
      fail("a '$' anchor inside the pattern, which is not supported");
    ++i_;
    return make_set(range(static_cast<unsigned char>(c), static_cast<unsigned char>(c)));
  }

  std::string_view p_;
  std::size_t i_ = 0;
};

// Thompson NFA: each state has byte edges (one set, one target) and epsilon edges.
struct nfa {
  struct state {
    byte_set bytes;
    int32_t on_bytes = -1;
    std::vector<int32_t> eps;
  };
  std::vector<state> states;
  std::size_t max_states = 0;

  int32_t add() {
    if (states.size() >= max_states)
      throw regex_error("regex: the pattern is too large (its automaton needs more than " + std::to_string(max_states) +
                        " states)");
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }

  struct frag {
    int32_t in, out;
  };

  frag build(const node& n) {
    switch (n.kind) {
      case node::empty: {
        int32_t s = add();
        return {s, s};
      }
      case node::set: {
        int32_t a = add(), b = add();
        states[a].bytes = n.bytes;
        states[a].on_bytes = b;
        return {a, b};
      }
      case node::concat: {
        int32_t s = add();
        frag f{s, s};
        for (const auto& p : n.parts) {
          frag g = build(*p);
          states[f.out].eps.push_back(g.in);
          f.out = g.out;
        }
        return f;
      }
      case node::alt: {
        int32_t in = add(), out = add();
        for (const auto& p : n.parts) {
          frag g = build(*p);
          states[in].eps.push_back(g.in);
          states[g.out].eps.push_back(out);
        }
        return {in, out};
      }
      case node::repeat: {
        const node& body = *n.parts.front();
        int32_t s = add();
        frag f{s, s};
        for (int k = 0; k < n.min; ++k) {
          frag g = build(body);
          states[f.out].eps.push_back(g.in);
          f.out = g.out;
        }
        if (n.max < 0) {
          frag g = build(body);
          int32_t out = add();
          states[f.out].eps.push_back(g.in);
          states[f.out].eps.push_back(out);
          states[g.out].eps.push_back(g.in);
          states[g.out].eps.push_back(out);
          f.out = out;
        } else {
          int32_t out = add();
          for (int k = n.min; k < n.max; ++k) {
            frag g = build(body);
            states[f.out].eps.push_back(out);
            states[f.out].eps.push_back(g.in);
            f.out = g.out;
          }
          states[f.out].eps.push_back(out);
          f.out = out;
        }
        return f;
      }
    }
    return {add(), add()};
  }

  void closure(std::vector<int32_t>& set) const {
    std::vector<int32_t> stack = set;
    std::vector<uint8_t> in(states.size(), 0);
    for (int32_t s : set)
      in[static_cast<std::size_t>(s)] = 1;
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : states[static_cast<std::size_t>(s)].eps)
        if (!in[static_cast<std::size_t>(t)]) {
          in[static_cast<std::size_t>(t)] = 1;
          set.push_back(t);
          stack.push_back(t);
        }
    }
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

byte_dfa byte_dfa::compile(std::string_view pattern, std::size_t max_states) {
  node_ptr tree = parser{pattern}.parse();
  nfa n;
  n.max_states = max_states * 8;
  nfa::frag f = n.build(*tree);
  const int32_t final_state = f.out;

  // Subset construction.
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  std::vector<int32_t> table;
  std::vector<uint8_t> accept;
  std::vector<int32_t> start{f.in};
  n.closure(start);
  ids.emplace(start, 0);
  sets.push_back(start);
  for (std::size_t d = 0; d < sets.size(); ++d) {
    table.resize((d + 1) * 256, dead);
    const std::vector<int32_t> cur = sets[d];
    accept.push_back(std::binary_search(cur.begin(), cur.end(), final_state) ? 1 : 0);
    for (int b = 0; b < 256; ++b) {
      std::vector<int32_t> to;
      for (int32_t s : cur) {
        const auto& st = n.states[static_cast<std::size_t>(s)];
        if (st.on_bytes >= 0 && st.bytes.test(static_cast<std::size_t>(b)))
          to.push_back(st.on_bytes);
      }
      if (to.empty())
        continue;
      std::sort(to.begin(), to.end());
      to.erase(std::unique(to.begin(), to.end()), to.end());
      n.closure(to);
      auto [it, fresh] = ids.emplace(to, static_cast<int32_t>(sets.size()));
      if (fresh) {
        if (sets.size() >= max_states)
          throw regex_error("regex: the pattern is too large (more than " + std::to_string(max_states) +
                            " automaton states)");
        sets.push_back(std::move(to));
      }
      table[d * 256 + static_cast<std::size_t>(b)] = it->second;
    }
  }

  // Prune states from which no accepting state is reachable: the masks then never lead into a dead end.
  const std::size_t n_states = sets.size();
  std::vector<std::vector<int32_t>> reverse(n_states);
  for (std::size_t s = 0; s < n_states; ++s)
    for (int b = 0; b < 256; ++b)
      if (int32_t t = table[s * 256 + static_cast<std::size_t>(b)]; t != dead)
        reverse[static_cast<std::size_t>(t)].push_back(static_cast<int32_t>(s));
  std::vector<uint8_t> live(n_states, 0);
  std::vector<int32_t> stack;
  for (std::size_t s = 0; s < n_states; ++s)
    if (accept[s]) {
      live[s] = 1;
      stack.push_back(static_cast<int32_t>(s));
    }
  while (!stack.empty()) {
    int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : reverse[static_cast<std::size_t>(s)])
      if (!live[static_cast<std::size_t>(p)]) {
        live[static_cast<std::size_t>(p)] = 1;
        stack.push_back(p);
      }
  }
  if (!live[0])
    throw regex_error("regex: the pattern matches nothing");
  for (int32_t& t : table)
    if (t != dead && !live[static_cast<std::size_t>(t)])
      t = dead;

  byte_dfa out;
  out.table_ = std::move(table);
  out.accept_ = std::move(accept);
  return out;
}

int32_t byte_dfa::walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == dead)
      return dead;
    state = next(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool byte_dfa::matches(std::string_view text) const {
  const int32_t s = walk(start(), text);
  return s != dead && accepting(s);
}

std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view{"\\.^$|?*+()[]{}/-"}.find(c) != std::string_view::npos)
      out += '\\';
    out += c;
  }
  return out;
}

}  // namespace actorllm::text::structured
