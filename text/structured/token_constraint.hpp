// Token masks for structured outputs: a pattern's byte_dfa walked over a vocabulary's token bytes. A mask depends
// only on the automaton state, so each state's mask is computed once (a walk of the vocabulary's byte trie that
// stops at the first dead byte) and cached; a decoding step then costs one lookup plus the walk of the sampled
// token's bytes. Compiled constraints are shared through constraint_cache.hpp, so a schema is compiled once.
#pragma once

#include "text/structured/byte_dfa.hpp"
#include "text/tokenizer.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace actorllm::text::structured {

/// The bytes each token id stands for inside generated text, and a trie over them.
class vocab_index {
 public:
  /// From a tokenizer: byte-fallback tokens are their byte; other tokens their text as it reads after another
  /// token (a Metaspace "▁" is a space); special/added tokens and tokens that are not whole UTF-8 on their own are
  /// left out (they can never be chosen under a constraint), except the end-of-sequence ids.
  static std::shared_ptr<const vocab_index> from_tokenizer(const tokenizer& tok);
  /// From explicit token bytes (tests); empty strings are left out.
  static std::shared_ptr<const vocab_index> from_bytes(std::vector<std::string> bytes, std::vector<int32_t> eos_ids);

  int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
  std::span<const int32_t> eos_ids() const { return eos_ids_; }

  struct trie_node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;                        // ids whose bytes end here
  };
  const std::vector<trie_node>& trie() const { return trie_; }

 private:
  void build_trie();

  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_ids_;
  std::vector<trie_node> trie_;
};

/// A compiled constraint: the automaton, the vocabulary and the per-state masks (thread-safe: several sequences
/// and threads may share one).
class token_constraint {
 public:
  token_constraint(byte_dfa dfa, std::shared_ptr<const vocab_index> vocab);

  /// The start state.
  int32_t start() const { return dfa_.start(); }
  /// The state after `token` (byte_dfa::dead when the token breaks the constraint; eos keeps the state).
  int32_t advance(int32_t state, int32_t token) const;
  /// Whether `token` is an eos id of the vocabulary.
  bool is_eos(int32_t token) const;
  /// The allowed tokens of `state` as bits (bit t of word t / 64); eos ids only where the output so far matches;
  /// nothing for the dead state.
  /// The reference stays valid for the constraint's lifetime.
  const std::vector<uint64_t>& mask(int32_t state) const;
  /// Whether `state` accepts (the output so far matches the whole pattern).
  bool accepting(int32_t state) const { return dfa_.accepting(state); }
  const byte_dfa& dfa() const { return dfa_; }
  int32_t n_vocab() const { return vocab_->n_vocab(); }
  /// The bytes it holds: the automaton and the masks computed so far (they grow as states are visited).
  std::size_t memory_bytes() const;

 private:
  std::vector<uint64_t> compute_mask(int32_t state) const;

  byte_dfa dfa_;
  std::shared_ptr<const vocab_index> vocab_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<std::vector<uint64_t>>> masks_;  // per state, computed on first use
  mutable std::atomic<std::size_t> mask_bytes_{0};                     // what masks_ holds
  std::vector<uint64_t> none_;                                         // the mask of the dead state: nothing allowed
};

}  // namespace actorllm::text::structured
