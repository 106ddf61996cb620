// Token masks per automaton state, computed by one trie walk and cached.
#include "text/structured/token_constraint.hpp"
#include "util/hex.hpp"

#include <algorithm>
#include <utility>

namespace actorllm::text::structured {

namespace {

constexpr std::string_view replacement_char = "\xEF\xBF\xBD";

// A token's text inside generated text: decode({id, id}) minus decode({id}) keeps a leading space that decoders
// strip at the start of a text (the same rule the server's logprobs use).
std::string token_text(const tokenizer& tok, int32_t id) {
  const int32_t once[] = {id};
  std::string alone = tok.decode(once);
  if (alone.find(replacement_char) != std::string::npos)
    return {};
  const int32_t twice[] = {id, id};
  std::string both = tok.decode(twice);
  if (!both.starts_with(alone))
    return alone;
  return both.substr(alone.size());
}

constexpr int hex(char c) { return hex_digit_value(c); }

}  // namespace

std::shared_ptr<const vocab_index> vocab_index::from_tokenizer(const tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<std::size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id) || tok.is_added(id))
      continue;
    if (tok.is_byte_fallback_token(id)) {
      const std::string raw = tok.id_to_token(id);  // "<0xNN>"
      if (raw.size() == 6 && hex(raw[3]) >= 0 && hex(raw[4]) >= 0)
        bytes[static_cast<std::size_t>(id)] = std::string(1, static_cast<char>(hex(raw[3]) * 16 + hex(raw[4])));
      continue;
    }
    bytes[static_cast<std::size_t>(id)] = token_text(tok, id);
  }
  std::vector<int32_t> eos;
  if (auto e = tok.eos_id())
    eos.push_back(*e);
  return from_bytes(std::move(bytes), std::move(eos));
}

std::shared_ptr<const vocab_index> vocab_index::from_bytes(std::vector<std::string> bytes,
                                                           std::vector<int32_t> eos_ids) {
  auto v = std::make_shared<vocab_index>();
  v->bytes_ = std::move(bytes);
  v->eos_ids_ = std::move(eos_ids);
  for (int32_t e : v->eos_ids_)
    if (e >= 0 && e < v->n_vocab())
      v->bytes_[static_cast<std::size_t>(e)].clear();  // eos is never text
  v->build_trie();
  return v;
}

void vocab_index::build_trie() {
  trie_.assign(1, {});
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string& b = bytes_[static_cast<std::size_t>(id)];
    if (b.empty())
      continue;
    int32_t node = 0;
    for (char c : b) {
      const auto byte = static_cast<uint8_t>(c);
      auto& kids = trie_[static_cast<std::size_t>(node)].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::pair<uint8_t, int32_t>{byte, -1});
      if (it != kids.end() && it->first == byte) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(trie_.size());
        kids.insert(it, {byte, next});
        trie_.emplace_back();
        node = next;
      }
    }
    trie_[static_cast<std::size_t>(node)].tokens.push_back(id);
  }
}

token_constraint::token_constraint(byte_dfa dfa, std::shared_ptr<const vocab_index> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)) {
  masks_.resize(dfa_.n_states());
  none_.assign((static_cast<std::size_t>(vocab_->n_vocab()) + 63) / 64, 0);
}

bool token_constraint::is_eos(int32_t token) const {
  const auto e = vocab_->eos_ids();
  return std::find(e.begin(), e.end(), token) != e.end();
}

int32_t token_constraint::advance(int32_t state, int32_t token) const {
  if (state == byte_dfa::dead || token < 0 || token >= vocab_->n_vocab())
    return byte_dfa::dead;
  if (is_eos(token))
    return dfa_.accepting(state) ? state : byte_dfa::dead;
  const std::string& b = vocab_->bytes(token);
  if (b.empty())
    return byte_dfa::dead;
  return dfa_.walk(state, b);
}

std::vector<uint64_t> token_constraint::compute_mask(int32_t state) const {
  std::vector<uint64_t> bits((static_cast<std::size_t>(vocab_->n_vocab()) + 63) / 64, 0);
  auto set = [&](int32_t t) { bits[static_cast<std::size_t>(t) / 64] |= uint64_t{1} << (t % 64); };
  const auto& trie = vocab_->trie();
  // Depth-first over (trie node, automaton state), cut at the first dead byte.
  std::vector<std::pair<int32_t, int32_t>> stack{{0, state}};
  while (!stack.empty()) {
    auto [node, s] = stack.back();
    stack.pop_back();
    const auto& n = trie[static_cast<std::size_t>(node)];
    if (node != 0)
      for (int32_t t : n.tokens)
        set(t);
    for (auto [byte, child] : n.children) {
      const int32_t next = dfa_.next(s, byte);
      if (next != byte_dfa::dead)
        stack.emplace_back(child, next);
    }
  }
  if (dfa_.accepting(state))
    for (int32_t e : vocab_->eos_ids())
      if (e >= 0 && e < vocab_->n_vocab())
        set(e);
  return bits;
}

const std::vector<uint64_t>& token_constraint::mask(int32_t state) const {
  if (state < 0 || static_cast<std::size_t>(state) >= masks_.size())
    return none_;
  std::lock_guard lock{mutex_};
  auto& slot = masks_[static_cast<std::size_t>(state)];
  if (!slot) {
    slot = std::make_unique<std::vector<uint64_t>>(compute_mask(state));
    mask_bytes_ += slot->size() * sizeof(uint64_t) + sizeof(*slot);
  }
  return *slot;
}

std::size_t token_constraint::memory_bytes() const {
  return sizeof(*this) + dfa_.memory_bytes() + masks_.size() * sizeof(masks_[0]) + none_.size() * sizeof(uint64_t) +
         mask_bytes_.load();
}

}  // namespace actorllm::text::structured
