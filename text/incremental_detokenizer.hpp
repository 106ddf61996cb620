// Streaming detokenization for generated tokens (vLLM's detokenize_incrementally with prefix/read offsets):
// each push() returns the text that the new token made final, never half a character.
#pragma once

#include "text/tokenizer.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actorllm::text {

/// Turns a stream of generated token ids into text deltas.
///
/// Guarantee: the deltas of push() followed by finish() concatenate to decode(prompt + generated) minus
/// decode(prompt), i.e. the generated text as a continuation of the prompt (a SentencePiece leading space is
/// stripped only at the true start of the text, so a reply after a prompt keeps it). A delta is only emitted once
/// it is final: never a partial UTF-8 character, never part of a run of byte-fallback tokens that could still
/// change. (When the prompt itself ends inside a character, its decode ends in U+FFFD and cannot be a prefix of the
/// full text; the first delta then starts with the completed character in place of that U+FFFD.)
///
/// How: like vLLM, each step decodes a short window ids[prefix_offset:] and emits what follows the text of
/// ids[prefix_offset:read_offset]. The window keeps at least one token of decoded context in front of the new
/// tokens, so that decoder effects tied to the start of a text (Strip, Metaspace) only act inside the context,
/// and read_offset only moves to positions where the decoded text cannot change any more.
class incremental_detokenizer {
 public:
  /// `tok` is copied (cheap: shared state). `prompt_ids` are the ids the generated text continues.
  incremental_detokenizer(const tokenizer& tok, std::span<const int32_t> prompt_ids, bool skip_special_tokens);

  /// Adds a generated id and returns the text that became final (often empty while a character is incomplete).
  std::string push(int32_t id);

  /// Ends the stream: returns whatever is still held back (an incomplete character comes out as U+FFFD).
  std::string finish();

  /// Number of ids pushed so far.
  size_t num_generated() const { return ids_.size() - prompt_size_; }

 private:
  std::string decode_range(size_t begin, size_t end) const;
  // True when text may be cut after ids_[end - 1]: the decoder will not join it with a later token.
  bool is_cut_point(size_t end, const std::string& text_up_to_end) const;
  // True when ids_[pos - 1] and ids_[pos] belong to one run of byte-fallback tokens.
  bool inside_byte_run(size_t pos) const;
  void advance(size_t end, const std::string& window_text);

  tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prompt_size_ = 0;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string prefix_text_;  // decode(ids_[prefix_offset_:read_offset_])
};

}  // namespace actorllm::text
