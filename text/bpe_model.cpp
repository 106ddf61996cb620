// BPE word tokenization, a line-by-line port of HF tokenizers' BPE::merge_word and Word::merge_all so that the
// result is identical, including its tie-breaking (lowest rank, then leftmost) and stale-queue-entry handling.
#include "text/bpe_model.hpp"

#include "util/utf8.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>

namespace actorllm::text {
namespace {

std::atomic<uint64_t> next_serial{1};

// Direct-mapped, per thread: a lookup costs one hash and one string compare, and no lock is ever taken.
struct cache_slot {
  uint64_t owner = 0;  // bpe_model::serial_, 0 = empty
  uint64_t hash = 0;
  std::string word;
  std::vector<int32_t> ids;
};
constexpr size_t cache_slots = size_t{1} << 13;
constexpr size_t max_cached_word = 64;  // bytes; longer words are rare and merged directly
constexpr char32_t char_table_limit = 0x3000;
constexpr std::string_view metaspace = "\xE2\x96\x81";  // U+2581 "▁"

// True when `token` holds a "▁" directly after a character other than "▁".
bool joins_across_metaspace(std::string_view token) {
  for (size_t pos = token.find(metaspace, 1); pos != std::string_view::npos; pos = token.find(metaspace, pos + 1)) {
    if (pos < metaspace.size() || token.substr(pos - metaspace.size(), metaspace.size()) != metaspace)
      return true;
  }
  return false;
}

}  // namespace

bpe_model::bpe_model(bpe_options options) : options_(std::move(options)), serial_(next_serial++) {
  byte_tokens_.fill(-1);
}

void bpe_model::add_token(std::string_view token, int32_t id) {
  vocab_.insert_or_assign(token, id);
  if (static_cast<size_t>(id) >= id_to_token_.size()) {
    id_to_token_.resize(static_cast<size_t>(id) + 1);
    has_token_.resize(static_cast<size_t>(id) + 1, false);
  }
  id_to_token_[static_cast<size_t>(id)] = std::string{token};
  has_token_[static_cast<size_t>(id)] = true;
}

std::optional<std::string> bpe_model::add_merge(std::string_view left, std::string_view right, uint32_t rank) {
  const int32_t a = vocab_.find(left);
  if (a < 0)
    return std::string{left};
  const int32_t b = vocab_.find(right);
  if (b < 0)
    return std::string{right};
  // HF strips the continuing-subword prefix from the right part when forming the merged spelling.
  std::string merged{left};
  const std::string_view prefix = options_.continuing_subword_prefix;
  merged.append(right.starts_with(prefix) ? right.substr(prefix.size()) : right);
  const int32_t id = vocab_.find(merged);
  if (id < 0)
    return merged;
  merges_.insert_or_assign(a, b, {rank, id});
  return std::nullopt;
}

std::optional<std::string> bpe_model::finish_loading() {
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
    if (unk_id_ < 0)
      return "unk_token \"" + *options_.unk_token + "\" is not in the vocabulary";
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_tokens_[static_cast<size_t>(b)] = vocab_.find(name);
  }
  // Chunking also needs "▁" itself in the vocabulary (so that an unknown run never continues across a chunk
  // start) and no ignore_merges (which looks at whole words).
  split_before_metaspace_ = options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty() &&
                            !options_.ignore_merges && vocab_.find(metaspace) >= 0;
  for (size_t id = 0; split_before_metaspace_ && id < id_to_token_.size(); ++id) {
    if (has_token_[id] && joins_across_metaspace(id_to_token_[id]))
      split_before_metaspace_ = false;
  }
  char_ids_.clear();
  if (options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty()) {
    char_ids_.resize(char_table_limit);
    std::string spelled;
    for (char32_t cp = 0; cp < char_table_limit; ++cp) {
      spelled.clear();
      if (cp < 0xD800 || cp > 0xDFFF)
        append_code_point(spelled, cp);
      char_ids_[cp] = spelled.empty() ? -1 : vocab_.find(spelled);
    }
  }
  return std::nullopt;
}

const std::string* bpe_model::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[static_cast<size_t>(id)])
    return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void bpe_model::tokenize(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const {
  if (word.empty())
    return;
  if (options_.ignore_merges) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  tokenize_cached(word, out, scratch);
}

void bpe_model::tokenize_cached(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const {
  if (word.size() > max_cached_word && split_before_metaspace_) {
    size_t start = 0;
    for (size_t pos = word.find(metaspace, 1); pos != std::string_view::npos; pos = word.find(metaspace, pos + 1)) {
      const bool after_metaspace =
          pos >= metaspace.size() && word.substr(pos - metaspace.size(), metaspace.size()) == metaspace;
      if (after_metaspace || pos == start)
        continue;
      tokenize_chunk(word.substr(start, pos - start), out, scratch);
      start = pos;
    }
    tokenize_chunk(word.substr(start), out, scratch);
    return;
  }
  tokenize_chunk(word, out, scratch);
}

void bpe_model::tokenize_chunk(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const {
  if (word.size() > max_cached_word) {
    merge_word(word, out, scratch);
    return;
  }
  thread_local std::vector<cache_slot> cache(cache_slots);
  const uint64_t h = hash_bytes(word);
  cache_slot& slot = cache[h & (cache_slots - 1)];
  if (slot.owner == serial_ && slot.hash == h && slot.word == word) {
    out.insert(out.end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  const size_t first = out.size();
  merge_word(word, out, scratch);
  slot.owner = serial_;
  slot.hash = h;
  slot.word.assign(word);
  slot.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

void bpe_model::merge_word(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  auto add = [&](int32_t id, uint32_t length) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0)
      symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, length});
  };

  const bool has_prefix = !options_.continuing_subword_prefix.empty();
  const bool has_suffix = !options_.end_of_word_suffix.empty();
  int32_t pending_unk = -1;  // an unknown run not yet added (HF's `unk`)
  uint32_t pending_unk_length = 0;
  size_t i = 0;
  while (i < word.size()) {
    size_t n = utf8_sequence_length(word, i);
    if (n == 0)
      n = 1;  // unreachable for validated text; keeps the loop finite regardless
    const size_t end = i + n;
    std::string_view s = word.substr(i, n);
    if ((has_prefix && i > 0) || (has_suffix && end == word.size())) {
      scratch.piece.clear();
      if (has_prefix && i > 0)
        scratch.piece += options_.continuing_subword_prefix;
      scratch.piece += s;
      if (has_suffix && end == word.size())
        scratch.piece += options_.end_of_word_suffix;
      s = scratch.piece;
    }
    const auto byte_length = static_cast<uint32_t>(n);
    int32_t id = -1;
    if (!char_ids_.empty() && n == s.size()) {
      size_t k = i;
      const char32_t cp = next_code_point(word, k);
      id = cp < char_table_limit ? char_ids_[cp] : vocab_.find(s);
    } else {
      id = vocab_.find(s);
    }
    i = end;
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk, pending_unk_length);
        pending_unk = -1;
      }
      add(id, byte_length);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : s)
        all = all && byte_tokens_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // As in HF, a pending unknown run stays pending across byte-fallback pieces.
        for (char c : s)
          add(byte_tokens_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && options_.fuse_unk) {
        pending_unk_length += byte_length;
      } else {
        if (pending_unk >= 0)
          add(pending_unk, pending_unk_length);
        pending_unk = unk_id_;
        pending_unk_length = byte_length;
      }
    }
    // Without an unk token an unknown character is dropped, as HF does.
  }
  if (pending_unk >= 0)
    add(pending_unk, pending_unk_length);

  // Word::merge_all: a min-queue on (rank, position) over adjacent pairs.
  auto& queue = scratch.queue;
  queue.clear();
  auto later = [](const bpe_scratch::candidate& x, const bpe_scratch::candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const merge_table::merge* m = merges_.find(symbols[k].id, symbols[k + 1].id))
      queue.push_back({m->rank, static_cast<int32_t>(k), m->id});
  }
  std::make_heap(queue.begin(), queue.end(), later);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const bpe_scratch::candidate top = queue.back();
    queue.pop_back();
    auto& current = symbols[static_cast<size_t>(top.pos)];
    if (current.length == 0 || current.next == -1)
      continue;
    const int32_t next_pos = current.next;
    const bpe_scratch::symbol right = symbols[static_cast<size_t>(next_pos)];
    // Skip entries made stale by an earlier merge (HF compares the would-be result id).
    const merge_table::merge* now = merges_.find(current.id, right.id);
    if (now == nullptr || now->id != top.id)
      continue;
    current.id = top.id;
    current.length += right.length;
    current.next = right.next;
    symbols[static_cast<size_t>(next_pos)].length = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size())
      symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (current.prev >= 0) {
      const auto& prev = symbols[static_cast<size_t>(current.prev)];
      if (const merge_table::merge* m = merges_.find(prev.id, current.id)) {
        queue.push_back({m->rank, current.prev, m->id});
        std::push_heap(queue.begin(), queue.end(), later);
      }
    }
    if (current.next > -1 && static_cast<size_t>(current.next) < symbols.size()) {
      const auto& next = symbols[static_cast<size_t>(current.next)];
      if (const merge_table::merge* m = merges_.find(current.id, next.id)) {
        queue.push_back({m->rank, top.pos, m->id});
        std::push_heap(queue.begin(), queue.end(), later);
      }
    }
  }
  for (const auto& s : symbols) {
    if (s.length != 0)
      out.push_back(s.id);
  }
}

}  // namespace actorllm::text
