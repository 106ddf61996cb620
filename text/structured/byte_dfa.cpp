// Regex -> syntax tree -> Thompson NFA -> subset construction over byte classes -> pruned DFA. Exceptions
// (regex_error) only while compiling. Every stage is bounded by structured_limits as it grows: the parser bounds the
// nesting (so the NFA build and the tree's destructor, which recurse over the tree, stay shallow) and the node count,
// the NFA its states, the subset construction its DFA states, the memory of their NFA-state sets and its work.
#include "text/structured/byte_dfa.hpp"
#include "util/check.hpp"
#include "util/hex.hpp"

#include <algorithm>
#include <bitset>
#include <functional>
#include <memory>
#include <unordered_map>

namespace actorllm::text::structured {

namespace {

using byte_set = std::bitset<256>;

// A syntax tree node. `depth` counts the groups and quantifiers at and below it; the parser refuses a tree deeper
// than the limit, and the tree's height is at most three times that (an alternation, a sequence and a quantifier
// per level), which bounds every recursion over it.
struct node {
  enum kind_t : uint8_t { set, concat, alt, repeat, empty } kind = empty;
  int32_t set_id = -1;                       // set: index into the parser's byte sets
  int32_t min = 0, max = -1;                 // repeat; max -1: unbounded
  std::size_t depth = 0;                     // nesting of groups and quantifiers
  std::vector<std::unique_ptr<node>> parts;  // concat, alt; repeat: one
};
using node_ptr = std::unique_ptr<node>;

constexpr int max_repeat = 1000;

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

// {lo,hi} applied to x{a,b} as one repeat of x, when that keeps the language: the counts c*k for k in [lo, hi]
// with c in [a, b] must fill [a*lo, b*hi] without gaps. Stacked quantifiers (`a**`, `(a+)?`, `(x{2}){3}`) then
// build no chain of repeat nodes. False (keep both) otherwise, or when the product passes max_repeat.
bool collapse(int a, int b, int lo, int hi, int& out_min, int& out_max) {
  if (b == 0 || hi == 0) {
    out_min = out_max = 0;
    return true;
  }
  const int64_t new_min = int64_t{a} * lo;
  const int64_t new_max = (b < 0 || hi < 0) ? -1 : int64_t{b} * hi;
  if (new_min > max_repeat || new_max > max_repeat)
    return false;
  if (lo != hi) {
    if (lo == 0 && a > 1)  // {0} then [a, b]: a gap unless a <= 1
      return false;
    // [m*a, m*b] and [(m+1)*a, (m+1)*b] touch for every m from the first on (the gap only shrinks as m grows).
    const int64_t m = std::max(lo, 1);
    if ((hi < 0 || hi > m) && b >= 0 && (m + 1) * a > m * b + 1)
      return false;
  }
  out_min = static_cast<int>(new_min);
  out_max = static_cast<int>(new_max);
  return true;
}

// The syntax tree and the distinct byte sets its set nodes use.
struct syntax {
  node_ptr root;
  std::vector<byte_set> sets;
};

class parser {
 public:
  parser(std::string_view p, const structured_limits& limits) : p_(p), limits_(limits) {}

  syntax parse() {
    if (p_.size() > limits_.pattern_bytes())
      throw regex_error("regex: the pattern is " + std::to_string(p_.size()) + " bytes, more than " +
                        std::to_string(limits_.pattern_bytes()) + " (16 x --max-structured-output-bytes)");
    if (at('^'))
      ++i_;
    node_ptr n = alternation();
    if (i_ < p_.size())
      fail(p_[i_] == ')' ? "an unbalanced ')'" : "an unexpected character");
    return {std::move(n), std::move(sets_)};
  }

 private:
  // The message quotes the pattern around the offset, not all of it (a refused pattern may be megabytes), cut at
  // UTF-8 character boundaries (it goes into a JSON error body).
  [[noreturn]] void fail(const std::string& what) const {
    constexpr std::size_t context = 40;
    auto continuation = [&](std::size_t k) {
      return k < p_.size() && (static_cast<unsigned char>(p_[k]) & 0xC0) == 0x80;
    };
    std::size_t from = std::min(i_ > context ? i_ - context : 0, p_.size());
    while (from > 0 && continuation(from))
      --from;
    std::size_t to = std::min(p_.size(), from + 2 * context);
    while (to > from && continuation(to))
      --to;
    const std::string quoted{p_.substr(from, to - from)};
    const bool whole = from == 0 && to == p_.size();
    throw regex_error(
        "regex: " + what + " at offset " + std::to_string(i_) + " of " +
        (whole ? "'" + quoted + "'" : "the pattern (" + std::to_string(p_.size()) + " bytes; near '" + quoted + "')"));
  }
  [[noreturn]] void fail_depth() const {
    fail("groups and quantifiers nested more than --max-structured-output-depth (" + std::to_string(limits_.max_depth) +
         ") deep");
  }
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }

  // Every node becomes at least one NFA state: counting them bounds the tree by the NFA's limit before it is built.
  node_ptr make(node::kind_t k) {
    if (++n_nodes_ > limits_.nfa_states())
      fail("a pattern too large: more than " + std::to_string(limits_.nfa_states()) +
           " nodes (8 x --max-structured-output-states)");
    auto n = std::make_unique<node>();
    n->kind = k;
    return n;
  }

  node_ptr make_set(const byte_set& b) {
    auto n = make(node::set);
    auto [it, fresh] = set_ids_.try_emplace(b, static_cast<int32_t>(sets_.size()));
    if (fresh)
      sets_.push_back(b);
    n->set_id = it->second;
    return n;
  }

  node_ptr alternation() {
    auto first = sequence();
    if (!at('|'))
      return first;
    auto a = make(node::alt);
    a->depth = first->depth;
    a->parts.push_back(std::move(first));
    while (at('|')) {
      ++i_;
      a->parts.push_back(sequence());
      a->depth = std::max(a->depth, a->parts.back()->depth);
    }
    return a;
  }

  node_ptr sequence() {
    std::vector<node_ptr> parts;
    while (i_ < p_.size() && !at('|') && !at(')')) {
      if (at('$') && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      auto a = atom();
      parts.push_back(quantified(std::move(a)));
    }
    if (parts.size() == 1)  // no concat node around one part: a group adds no tree level of its own
      return std::move(parts.front());
    auto s = make(parts.empty() ? node::empty : node::concat);
    for (const auto& part : parts)
      s->depth = std::max(s->depth, part->depth);
    s->parts = std::move(parts);
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
      if (a->kind == node::repeat && collapse(a->min, a->max, lo, hi, a->min, a->max))
        continue;
      if (a->depth + 1 > limits_.max_depth)
        fail_depth();
      auto r = make(node::repeat);
      r->depth = a->depth + 1;
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
      if (open_groups_ + 1 > limits_.max_depth)  // before recursing: the parser's own stack is bounded too
        fail_depth();
      ++open_groups_;
      auto inner = alternation();
      --open_groups_;
      if (!at(')'))
        fail("an unterminated group");
      ++i_;
      if (++inner->depth > limits_.max_depth)
        fail_depth();
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
  const structured_limits& limits_;
  std::size_t i_ = 0;
  std::size_t open_groups_ = 0;
  std::size_t n_nodes_ = 0;
  std::vector<byte_set> sets_;
  std::unordered_map<byte_set, int32_t> set_ids_;
};

// Thompson NFA: a state has at most one byte edge (a byte set, one target) and at most two epsilon edges (an
// alternation of n parts is a chain of n - 1 splits), so a state is 16 bytes and its closure walk has no vectors.
struct nfa {
  struct state {
    int32_t set_id = -1;    // the byte edge's set (-1: none)
    int32_t on_bytes = -1;  // its target
    int32_t eps[2] = {-1, -1};
  };
  std::vector<state> states;
  std::size_t max_states = 0;

  int32_t add() {
    if (states.size() >= max_states)
      throw regex_error("regex: the pattern expands to more than " + std::to_string(max_states) +
                        " NFA states (8 x --max-structured-output-states); counted repeats multiply their body");
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }

  void link(int32_t from, int32_t to) {
    auto& e = states[static_cast<std::size_t>(from)].eps;
    ACTORLLM_CHECK(e[1] < 0, "an NFA state with a third epsilon edge");
    (e[0] < 0 ? e[0] : e[1]) = to;
  }

  struct frag {
    int32_t in, out;  // `out` has no outgoing edge yet
  };

  // Recursion as deep as the tree: bounded by the parser's depth limit.
  frag build(const node& n) {
    switch (n.kind) {
      case node::empty: {
        int32_t s = add();
        return {s, s};
      }
      case node::set: {
        int32_t a = add(), b = add();
        states[static_cast<std::size_t>(a)].set_id = n.set_id;
        states[static_cast<std::size_t>(a)].on_bytes = b;
        return {a, b};
      }
      case node::concat: {
        int32_t s = add();
        frag f{s, s};
        for (const auto& p : n.parts) {
          frag g = build(*p);
          link(f.out, g.in);
          f.out = g.out;
        }
        return f;
      }
      case node::alt: {
        int32_t in = add(), out = add();
        int32_t split = in;
        for (std::size_t i = 0; i < n.parts.size(); ++i) {
          frag g = build(*n.parts[i]);
          link(g.out, out);
          link(split, g.in);
          if (i + 2 < n.parts.size()) {  // two or more parts left: the next split hangs on the second edge
            const int32_t next = add();
            link(split, next);
            split = next;
          }
        }
        return {in, out};
      }
      case node::repeat: {
        const node& body = *n.parts.front();
        int32_t s = add();
        frag f{s, s};
        for (int k = 0; k < n.min; ++k) {
          frag g = build(body);
          link(f.out, g.in);
          f.out = g.out;
        }
        if (n.max < 0) {
          frag g = build(body);
          int32_t out = add();
          link(f.out, g.in);
          link(f.out, out);
          link(g.out, g.in);
          link(g.out, out);
          f.out = out;
        } else {
          int32_t out = add();
          for (int k = n.min; k < n.max; ++k) {
            frag g = build(body);
            link(f.out, out);
            link(f.out, g.in);
            f.out = g.out;
          }
          link(f.out, out);
          f.out = out;
        }
        return f;
      }
    }
    return {add(), add()};
  }
};

// Bytes that no set of the pattern tells apart share a class (a column of the table): the subset construction then
// works per class, not per byte. Partition refinement by each distinct set.
struct byte_classes {
  std::array<uint8_t, 256> class_of{};
  std::size_t n = 1;
  std::vector<std::vector<uint8_t>> of_set;  // per set id: the classes it holds

  byte_classes(const std::vector<byte_set>& sets, const std::function<void(uint64_t)>& spend) {
    for (const byte_set& s : sets) {
      if (n == 256)
        break;
      spend(256);
      std::array<int16_t, 512> remap;
      remap.fill(-1);
      int16_t m = 0;
      for (std::size_t b = 0; b < 256; ++b) {
        const std::size_t key = std::size_t{class_of[b]} * 2 + (s.test(b) ? 1 : 0);
        if (remap[key] < 0)
          remap[key] = m++;
        class_of[b] = static_cast<uint8_t>(remap[key]);
      }
      n = static_cast<std::size_t>(m);
    }
    std::array<int, 256> first_byte;
    first_byte.fill(-1);
    for (int b = 255; b >= 0; --b)
      first_byte[class_of[static_cast<std::size_t>(b)]] = b;
    of_set.resize(sets.size());
    for (std::size_t i = 0; i < sets.size(); ++i) {
      spend(n);
      for (std::size_t c = 0; c < n; ++c)
        if (sets[i].test(static_cast<std::size_t>(first_byte[c])))
          of_set[i].push_back(static_cast<uint8_t>(c));
    }
  }
};

uint64_t hash_ids(const int32_t* p, std::size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(p[i]);
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
  }
  return h;
}

// The subset construction: a DFA state is the sorted set of NFA states with a byte edge (plus the final state)
// reachable by epsilon edges; the sets live in one array, found again through an open-addressing hash index.
class subset_builder {
 public:
  subset_builder(const nfa& n, const byte_classes& classes, int32_t final_state, const structured_limits& limits)
      : nfa_(n), classes_(classes), final_(final_state), limits_(limits), mark_(n.states.size(), 0) {
    slots_.assign(1024, -1);
    buckets_.resize(classes_.n);
  }

  void spend(uint64_t units) {
    work_ += units;
    if (work_ > limits_.compile_budget)
      throw regex_error("regex: compiling the pattern needs more work than --structured-output-compile-budget (" +
                        std::to_string(limits_.compile_budget) + " units)");
  }

  // Fills the table (n_states x classes, dead where no byte of a class moves on) and the accepting flags.
  void run(int32_t start, std::vector<int32_t>& table, std::vector<uint8_t>& accept) {
    std::vector<int32_t> seeds{start};
    closure(seeds);
    (void)find_or_add();
    const std::size_t nc = classes_.n;
    for (std::size_t d = 0; d < n_states(); ++d) {
      table.resize((d + 1) * nc, byte_dfa::dead);
      bool accepting = false;
      touched_.clear();
      for (std::size_t k = offsets_[d]; k < offsets_[d + 1]; ++k) {
        const int32_t s = elems_[k];
        if (s == final_)
          accepting = true;
        const nfa::state& st = nfa_.states[static_cast<std::size_t>(s)];
        if (st.set_id < 0)
          continue;
        const auto& cls = classes_.of_set[static_cast<std::size_t>(st.set_id)];
        spend(1 + cls.size());
        for (uint8_t c : cls) {
          if (buckets_[c].empty())
            touched_.push_back(c);
          buckets_[c].push_back(st.on_bytes);
        }
      }
      accept.push_back(accepting ? 1 : 0);
      // Classes whose targets are the same list share one closure (a wildcard spans many classes).
      done_.clear();
      for (uint8_t c : touched_) {
        auto& b = buckets_[c];
        spend(b.size());
        const uint64_t h = hash_ids(b.data(), b.size());
        int32_t id = -1;
        spend(done_.size());
        for (const auto& [dh, dc] : done_)
          if (dh == h && buckets_[dc] == b) {
            id = table[d * nc + dc];
            break;
          }
        if (id < 0) {
          closure(b);
          id = find_or_add();
          done_.emplace_back(h, c);
        }
        table[d * nc + c] = id;
      }
      for (uint8_t c : touched_)
        buckets_[c].clear();
    }
  }

  std::size_t n_states() const { return offsets_.size() - 1; }

 private:
  // The epsilon closure of `seeds`, kept to its byte-edge states and the final state, sorted, into out_.
  void closure(const std::vector<int32_t>& seeds) {
    if (++stamp_ == 0) {
      std::fill(mark_.begin(), mark_.end(), 0);
      stamp_ = 1;
    }
    out_.clear();
    stack_.clear();
    for (int32_t s : seeds)
      if (mark_[static_cast<std::size_t>(s)] != stamp_) {
        mark_[static_cast<std::size_t>(s)] = stamp_;
        stack_.push_back(s);
      }
    std::size_t visited = 0;
    while (!stack_.empty()) {
      const int32_t s = stack_.back();
      stack_.pop_back();
      ++visited;
      const nfa::state& st = nfa_.states[static_cast<std::size_t>(s)];
      if (st.set_id >= 0 || s == final_)
        out_.push_back(s);
      for (int32_t t : st.eps)
        if (t >= 0 && mark_[static_cast<std::size_t>(t)] != stamp_) {
          mark_[static_cast<std::size_t>(t)] = stamp_;
          stack_.push_back(t);
        }
    }
    spend(visited + out_.size());
    std::sort(out_.begin(), out_.end());
  }

  // The id of the DFA state whose set is out_, added when new.
  int32_t find_or_add() {
    spend(out_.size());
    const uint64_t h = hash_ids(out_.data(), out_.size());
    std::size_t mask = slots_.size() - 1;
    std::size_t i = h & mask;
    for (; slots_[i] >= 0; i = (i + 1) & mask) {
      const auto id = static_cast<std::size_t>(slots_[i]);
      if (hashes_[id] == h && offsets_[id + 1] - offsets_[id] == out_.size() &&
          std::equal(out_.begin(), out_.end(), elems_.begin() + static_cast<std::ptrdiff_t>(offsets_[id])))
        return slots_[i];
    }
    if (n_states() >= limits_.max_states)
      throw regex_error("regex: the automaton needs more than --max-structured-output-states (" +
                        std::to_string(limits_.max_states) + ") states");
    if (elems_.size() + out_.size() > limits_.set_entries())
      throw regex_error("regex: the automaton's state sets need more than " +
                        std::to_string(limits_.set_entries() * sizeof(int32_t) >> 20) +
                        " MiB while compiling (256 NFA states per --max-structured-output-states)");
    spend(classes_.n);  // its table row
    const auto id = static_cast<int32_t>(n_states());
    elems_.insert(elems_.end(), out_.begin(), out_.end());
    offsets_.push_back(elems_.size());
    hashes_.push_back(h);
    slots_[i] = id;
    if (2 * n_states() > slots_.size()) {  // keep the index at most half full
      std::vector<int32_t> grown(slots_.size() * 2, -1);
      mask = grown.size() - 1;
      for (std::size_t k = 0; k < n_states(); ++k) {
        std::size_t j = hashes_[k] & mask;
        while (grown[j] >= 0)
          j = (j + 1) & mask;
        grown[j] = static_cast<int32_t>(k);
      }
      slots_ = std::move(grown);
    }
    return id;
  }

  const nfa& nfa_;
  const byte_classes& classes_;
  const int32_t final_;
  const structured_limits& limits_;
  uint64_t work_ = 0;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> stack_, out_;
  std::vector<int32_t> elems_;
  std::vector<std::size_t> offsets_{0};
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> slots_;
  std::vector<std::vector<int32_t>> buckets_;
  std::vector<uint8_t> touched_;
  std::vector<std::pair<uint64_t, uint8_t>> done_;
};

}  // namespace

void byte_dfa::check_syntax(std::string_view pattern, const structured_limits& limits) {
  (void)parser{pattern, limits}.parse();
}

byte_dfa byte_dfa::compile(std::string_view pattern, const structured_limits& limits) {
  syntax tree = parser{pattern, limits}.parse();
  nfa n;
  n.max_states = limits.nfa_states();
  n.states.reserve(std::min<std::size_t>(n.max_states, pattern.size() * 2 + 16));
  const nfa::frag f = n.build(*tree.root);
  tree.root.reset();
  uint64_t class_work = 0;
  const byte_classes classes{tree.sets, [&](uint64_t units) {
                               class_work += units;
                               if (class_work > limits.compile_budget)
                                 throw regex_error(
                                     "regex: compiling the pattern needs more work than "
                                     "--structured-output-compile-budget (" +
                                     std::to_string(limits.compile_budget) + " units)");
                             }};
  std::vector<int32_t> table;
  std::vector<uint8_t> accept;
  subset_builder builder{n, classes, f.out, limits};
  builder.spend(class_work + n.states.size());
  builder.run(f.in, table, accept);
  const std::size_t nc = classes.n;
  builder.spend(table.size());  // the pruning below walks the table twice

  // Prune states from which no accepting state is reachable: the masks then never lead into a dead end. The
  // reverse edges in one array (counted, then filled), walked back from the accepting states.
  const std::size_t n_states = accept.size();
  std::vector<uint32_t> first(n_states + 1, 0);
  for (int32_t t : table)
    if (t != dead)
      ++first[static_cast<std::size_t>(t) + 1];
  for (std::size_t s = 0; s < n_states; ++s)
    first[s + 1] += first[s];
  std::vector<int32_t> from(first[n_states]);
  {
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (std::size_t s = 0; s < n_states; ++s)
      for (std::size_t c = 0; c < nc; ++c)
        if (int32_t t = table[s * nc + c]; t != dead)
          from[fill[static_cast<std::size_t>(t)]++] = static_cast<int32_t>(s);
  }
  std::vector<uint8_t> live(n_states, 0);
  std::vector<int32_t> stack;
  for (std::size_t s = 0; s < n_states; ++s)
    if (accept[s]) {
      live[s] = 1;
      stack.push_back(static_cast<int32_t>(s));
    }
  while (!stack.empty()) {
    const auto s = static_cast<std::size_t>(stack.back());
    stack.pop_back();
    for (uint32_t k = first[s]; k < first[s + 1]; ++k)
      if (const int32_t p = from[k]; !live[static_cast<std::size_t>(p)]) {
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
  out.class_of_ = classes.class_of;
  out.n_classes_ = nc;
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

void check_regex(std::string_view regex, const structured_limits& limits) {
  if (regex.size() > limits.max_bytes)
    throw regex_error("regex: the pattern is " + std::to_string(regex.size()) +
                      " bytes, more than --max-structured-output-bytes (" + std::to_string(limits.max_bytes) + ")");
  byte_dfa::check_syntax(regex, limits);
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
