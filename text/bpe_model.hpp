// The BPE model of Hugging Face tokenizers (models/bpe): splits one pre-tokenized word into vocabulary ids by
// applying merges lowest rank first, with byte fallback and unknown-token handling as HF does them.
#pragma once

#include "text/lookup_tables.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text {

/// Options of the "BPE" model object in tokenizer.json.
struct bpe_options {
  std::optional<std::string> unk_token;
  /// Prepended to every character but the first of a word before lookup (empty: none).
  std::string continuing_subword_prefix;
  /// Appended to the last character of a word before lookup (empty: none).
  std::string end_of_word_suffix;
  /// Consecutive unknown characters become one unknown token.
  bool fuse_unk = false;
  /// Characters missing from the vocabulary are spelled as `<0xXX>` byte tokens when those exist.
  bool byte_fallback = false;
  /// A word that is itself in the vocabulary is emitted whole, without merging (Llama 3).
  bool ignore_merges = false;
};

/// Reusable buffers for bpe_model::tokenize (one per thread / encode call; never shared).
struct bpe_scratch {
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t length;  // bytes of the word covered; 0 marks a symbol merged into its left neighbour
  };
  struct candidate {
    uint32_t rank;
    int32_t pos;
    int32_t id;
  };
  std::vector<symbol> symbols;
  std::vector<candidate> queue;
  std::string piece;
};

/// A BPE vocabulary with its merges. Immutable after loading; tokenize() may run on many threads at once.
class bpe_model {
 public:
  explicit bpe_model(bpe_options options);

  /// Adds a vocabulary entry (load time).
  void add_token(std::string_view token, int32_t id);

  /// Adds the merge `left right` with priority `rank` (load time). Returns the spelling that is missing from the
  /// vocabulary (`left`, `right` or their concatenation), or nullopt on success.
  std::optional<std::string> add_merge(std::string_view left, std::string_view right, uint32_t rank);

  /// Ends loading. Returns an error message (unk_token not in the vocabulary, ...) or nullopt.
  std::optional<std::string> finish_loading();

  /// Appends the ids of `word` (non-empty, well-formed UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const;

  /// The vocabulary id of `token`, or -1.
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }

  /// The spelling of `id`, or nullptr for an id the vocabulary does not hold.
  const std::string* id_to_token(int32_t id) const;

  /// One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

  const bpe_options& options() const { return options_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const;

  // Merging a word is the hot spot of encoding and most words repeat, so results are cached per thread (as HF
  // caches them per model). serial_ tells this model's cache entries from those of other models.
  void tokenize_cached(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const;
  void tokenize_chunk(std::string_view word, std::vector<int32_t>& out, bpe_scratch& scratch) const;

  bpe_options options_;
  uint64_t serial_;
  token_id_table vocab_;
  // Vocabulary id of each single character below U+3000 (-1: not in the vocabulary); empty when a continuing
  // subword prefix or end-of-word suffix changes how characters are looked up.
  std::vector<int32_t> char_ids_;
  merge_table merges_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::array<int32_t, 256> byte_tokens_{};  // id of "<0xXX>" per byte, or -1
  // SentencePiece-style vocabularies are tokenized without a pre-tokenizer, so a whole text is one "word". When
  // no token has a "▁" right after another character, no merge can join the pieces on both sides of such a
  // position, and the word may be tokenized chunk by chunk (each chunk cached) with the same result.
  bool split_before_metaspace_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace actorllm::text
