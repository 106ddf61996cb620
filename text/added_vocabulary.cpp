// Added-token matching: HF AddedVocabulary::find_matches with a byte trie standing in for its Aho-Corasick
// automaton (the token sets are small; a scan that only descends at bytes which start some token is fast).
#include "text/added_vocabulary.hpp"

#include "text/normalizer.hpp"
#include "text/unicode.hpp"
#include "util/utf8.hpp"

#include <algorithm>

namespace actorllm::text {
namespace {

// Decodes the code point that ends just before byte `end` of well-formed `s`.
char32_t code_point_before(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && is_utf8_continuation(static_cast<unsigned char>(s[b])))
    --b;
  return next_code_point(s, b);
}

}  // namespace

void added_vocabulary::insert(matcher& m, std::string_view key, int32_t index) {
  if (m.nodes.empty())
    m.nodes.emplace_back();
  if (key.empty())
    return;  // an empty token can never be matched (HF's automaton does not report empty patterns either)
  m.first_byte[static_cast<uint8_t>(key[0])] = true;
  int32_t n = 0;
  for (char c : key) {
    const auto byte = static_cast<uint8_t>(c);
    auto& children = m.nodes[static_cast<size_t>(n)].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>{byte, -1});
    if (it != children.end() && it->first == byte) {
      n = it->second;
      continue;
    }
    const auto child = static_cast<int32_t>(m.nodes.size());
    children.insert(it, {byte, child});
    m.nodes.emplace_back();
    n = child;
  }
  // With duplicate contents the first token keeps the match, like the first pattern in HF's automaton.
  if (m.nodes[static_cast<size_t>(n)].token < 0)
    m.nodes[static_cast<size_t>(n)].token = index;
}

void added_vocabulary::build(std::vector<added_token> tokens, const normalizer* norm, bool split_special) {
  tokens_ = std::move(tokens);
  raw_ = matcher{};
  normalized_ = matcher{};
  raw_.nodes.emplace_back();
  normalized_.nodes.emplace_back();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const added_token& t = tokens_[i];
    if (split_special && t.special)
      continue;
    if (t.normalized) {
      std::string content = t.content;
      if (norm != nullptr)
        norm->normalize(content);
      insert(normalized_, content, static_cast<int32_t>(i));
    } else {
      insert(raw_, t.content, static_cast<int32_t>(i));
    }
  }
}

bool added_vocabulary::find(const matcher& m, std::string_view text, size_t pos, size_t& begin, size_t& end,
                            int32_t& index) {
  if (m.empty())
    return false;
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = pos; i < text.size(); ++i) {
    if (!m.first_byte[data[i]])
      continue;
    int32_t n = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      const auto& children = m.nodes[static_cast<size_t>(n)].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::pair<uint8_t, int32_t>{data[k], -1});
      if (it == children.end() || it->first != data[k])
        break;
      n = it->second;
      if (m.nodes[static_cast<size_t>(n)].token >= 0) {
        best = m.nodes[static_cast<size_t>(n)].token;
        best_end = k + 1;
      }
    }
    if (best >= 0) {
      begin = i;
      end = best_end;
      index = best;
      return true;
    }
  }
  return false;
}

bool added_vocabulary::accept(std::string_view text, int32_t index, size_t& begin, size_t& stop,
                              size_t start_offset) const {
  const added_token& t = tokens_[static_cast<size_t>(index)];
  // A match can start inside the whitespace a previous rstrip token swallowed; HF would emit overlapping
  // segments there, we keep the segments disjoint by dropping such a match.
  if (begin < start_offset)
    return false;
  if (t.single_word) {
    const bool start_space = begin == 0 || !is_word_character(code_point_before(text, begin));
    size_t k = stop;
    const bool stop_space = stop == text.size() || !is_word_character(next_code_point(text, k));
    if (!start_space || !stop_space)
      return false;
  }
  if (t.lstrip) {
    size_t b = begin;
    while (b > 0) {
      size_t p = b - 1;
      while (p > 0 && is_utf8_continuation(static_cast<unsigned char>(text[p])))
        --p;
      size_t q = p;
      if (!is_whitespace(next_code_point(text, q)))
        break;
      b = p;
    }
    begin = std::max(b, start_offset);
  }
  if (t.rstrip) {
    while (stop < text.size()) {
      size_t q = stop;
      if (!is_whitespace(next_code_point(text, q)))
        break;
      stop = q;
    }
  }
  return true;
}

}  // namespace actorllm::text
