// Stop-string matching with an Aho-Corasick automaton: one state per prefix of a stop string, failure links to the
// longest proper suffix that is also such a prefix. The state after the text so far is exactly what must be held
// back (the longest suffix that could still grow into a stop string), so the matcher keeps no window to rescan.
#include "text/stop_string_matcher.hpp"

#include <algorithm>
#include <deque>
#include <numeric>
#include <utility>

namespace actorllm::text {

namespace {

constexpr uint32_t no_node = UINT32_MAX;

}  // namespace

struct stop_string_matcher::automaton {
  struct edge {
    unsigned char byte;
    uint32_t to;
  };
  struct node {
    uint32_t first_edge = 0;  // edges_[first_edge, first_edge + n_edges), sorted by byte
    uint32_t n_edges = 0;
    uint32_t fail = 0;
    uint32_t depth = 0;
    uint32_t stop = no_node;  // the first-listed stop string that is exactly this node's string
    uint32_t out = no_node;   // the deepest node on the failure chain (this one included) that is a stop string
  };

  std::vector<node> nodes;
  std::vector<edge> edges;
  std::vector<size_t> original_index;  // a stop's position in the constructor's list (empty ones skipped)

  uint32_t child(uint32_t n, unsigned char c) const {
    const node& x = nodes[n];
    const auto first = edges.begin() + x.first_edge;
    const auto last = first + x.n_edges;
    const auto it = std::lower_bound(first, last, c, [](const edge& e, unsigned char b) { return e.byte < b; });
    return it != last && it->byte == c ? it->to : no_node;
  }

  uint32_t step(uint32_t n, unsigned char c) const {
    for (;;) {
      if (const uint32_t to = child(n, c); to != no_node)
        return to;
      if (n == 0)
        return 0;
      n = nodes[n].fail;
    }
  }

  explicit automaton(const std::vector<std::string>& stops) {
    // Inserted in sorted order, a node's children arrive sorted and the child a string needs is always the last
    // one added: the trie is built without searching, and its edges end up grouped per node in one array.
    std::vector<uint32_t> order(stops.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return stops[a] < stops[b]; });
    std::vector<std::vector<edge>> children(1);
    nodes.emplace_back();
    for (const uint32_t s : order) {
      uint32_t n = 0;
      for (const char ch : stops[s]) {
        const auto c = static_cast<unsigned char>(ch);
        if (children[n].empty() || children[n].back().byte != c) {
          const auto added = static_cast<uint32_t>(nodes.size());
          children[n].push_back({c, added});
          nodes.emplace_back();
          nodes.back().depth = nodes[n].depth + 1;
          children.emplace_back();
        }
        n = children[n].back().to;
      }
      if (nodes[n].stop == no_node || s < nodes[n].stop)  // duplicates: the one listed first
        nodes[n].stop = s;
    }
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      nodes[n].first_edge = static_cast<uint32_t>(edges.size());
      nodes[n].n_edges = static_cast<uint32_t>(children[n].size());
      edges.insert(edges.end(), children[n].begin(), children[n].end());
    }
    children.clear();
    // Failure links breadth first: a node's link is found from its parent's, which is shallower.
    std::deque<uint32_t> queue;
    nodes[0].out = nodes[0].stop;
    for (uint32_t e = 0; e < nodes[0].n_edges; ++e) {
      const uint32_t v = edges[e].to;
      nodes[v].fail = 0;
      nodes[v].out = nodes[v].stop != no_node ? v : no_node;
      queue.push_back(v);
    }
    while (!queue.empty()) {
      const uint32_t u = queue.front();
      queue.pop_front();
      for (uint32_t e = nodes[u].first_edge; e < nodes[u].first_edge + nodes[u].n_edges; ++e) {
        const uint32_t v = edges[e].to;
        const unsigned char c = edges[e].byte;
        const uint32_t f = step(nodes[u].fail, c);
        nodes[v].fail = f == v ? 0 : f;
        nodes[v].out = nodes[v].stop != no_node ? v : nodes[nodes[v].fail].out;
        queue.push_back(v);
      }
    }
  }
};

stop_string_matcher::stop_string_matcher(std::vector<std::string> stop_strings, bool include_stop_str_in_output)
    : include_(include_stop_str_in_output) {
  std::vector<std::string> stops;
  std::vector<size_t> original;
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty())
      continue;
    stops.push_back(std::move(stop_strings[i]));
    original.push_back(i);
  }
  if (stops.empty())
    return;
  auto a = std::make_shared<automaton>(stops);
  a->original_index = std::move(original);
  automaton_ = std::move(a);
}

stop_string_matcher::result stop_string_matcher::push(std::string_view delta) {
  result r;
  if (stopped_ || delta.empty())
    return r;
  if (!automaton_) {
    r.text = std::string{delta};
    return r;
  }
  const automaton& a = *automaton_;
  // Positions below are offsets into held_ + delta. Every match found here ends in `delta` (earlier ones stopped
  // an earlier call); the one that starts first wins, then the stop string listed first.
  const auto held = static_cast<int64_t>(held_.size());
  int64_t best_start = 0;
  uint32_t best = no_node;
  for (size_t j = 0; j < delta.size(); ++j) {
    state_ = a.step(state_, static_cast<unsigned char>(delta[j]));
    const uint32_t hit = a.nodes[state_].out;
    if (hit == no_node)
      continue;
    // The deepest stop string ending here starts first; shallower ones ending here cannot win.
    const int64_t start = held + static_cast<int64_t>(j) + 1 - static_cast<int64_t>(a.nodes[hit].depth);
    if (best == no_node || start < best_start || (start == best_start && a.nodes[hit].stop < a.nodes[best].stop)) {
      best = hit;
      best_start = start;
    }
  }
  if (best != no_node) {
    // With include_ nothing is held, and the match may begin in text released before (best_start < 0).
    int64_t end = include_ ? best_start + static_cast<int64_t>(a.nodes[best].depth) : best_start;
    end = std::max<int64_t>(end, 0);
    const auto from_held = static_cast<size_t>(std::min(end, held));
    r.text = held_.substr(0, from_held);
    r.text.append(delta.substr(0, static_cast<size_t>(end - static_cast<int64_t>(from_held))));
    r.stop_index = a.original_index[a.nodes[best].stop];
    stopped_ = true;
    held_.clear();
    held_.shrink_to_fit();
    return r;
  }
  // No match: the state's string is the longest suffix that could still become a stop string. It never reaches
  // back past the text held so far, since the state deepens by at most one node per byte.
  const size_t hold = include_ ? 0 : std::min<size_t>(a.nodes[state_].depth, held_.size() + delta.size());
  std::string pending = std::move(held_);
  pending.append(delta);
  r.text = pending.substr(0, pending.size() - hold);
  held_ = pending.substr(pending.size() - hold);
  return r;
}

std::string stop_string_matcher::finish() {
  if (stopped_)
    return {};
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace actorllm::text
