// Added tokens (HF AddedVocabulary): special and user-added tokens matched in the raw text before anything else
// runs, so that e.g. "<|eot_id|>" becomes one id instead of being split into pieces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text {

class normalizer;

/// One entry of tokenizer.json's "added_tokens".
struct added_token {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only match when not inside a word
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = false;   // matched in the normalized text instead of the raw text
  bool special = false;      // skipped by decode(skip_special_tokens = true)
};

/// The added tokens and the two matchers (raw text / normalized text) built from them.
class added_vocabulary {
 public:
  /// Sets the tokens (load time). `norm` (may be null) normalizes the content of tokens with normalized = true,
  /// as HF does before matching them. `split_special` disables matching of special tokens (HF's
  /// split_special_tokens / encode_special_tokens).
  void build(std::vector<added_token> tokens, const normalizer* norm, bool split_special);

  const std::vector<added_token>& tokens() const { return tokens_; }

  /// Cuts `text` into segments: calls on_token(id) for a matched added token and on_text(begin, end) for the text
  /// between matches (never empty), in order. `normalized_pass` selects the matcher: false for the raw input,
  /// true for normalized segments.
  template <class OnToken, class OnText>
  void split(std::string_view text, bool normalized_pass, OnToken&& on_token, OnText&& on_text) const {
    const matcher& m = normalized_pass ? normalized_ : raw_;
    size_t start_offset = 0;  // end of the last emitted match
    size_t pos = 0;           // where the leftmost-longest scan resumes
    while (true) {
      size_t begin = 0;
      size_t end = 0;
      int32_t index = -1;
      if (!find(m, text, pos, begin, end, index))
        break;
      pos = end;
      size_t stop = end;
      if (!accept(text, index, begin, stop, start_offset))
        continue;
      if (start_offset < begin)
        on_text(start_offset, begin);
      on_token(tokens_[static_cast<size_t>(index)].id);
      start_offset = stop;
      pos = std::max(pos, stop);
    }
    if (start_offset < text.size())
      on_text(start_offset, text.size());
  }

 private:
  // A byte trie over token contents; each node's children sorted by byte.
  struct matcher {
    struct node {
      std::vector<std::pair<uint8_t, int32_t>> children;
      int32_t token = -1;  // index into tokens_ when a token ends here
    };
    std::vector<node> nodes;
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() <= 1; }
  };
  static void insert(matcher& m, std::string_view key, int32_t index);
  // Leftmost-longest match at or after `pos` (Aho-Corasick MatchKind::LeftmostLongest semantics).
  static bool find(const matcher& m, std::string_view text, size_t pos, size_t& begin, size_t& end, int32_t& index);
  // Applies single_word / lstrip / rstrip; false when the match is rejected. May move begin and stop.
  bool accept(std::string_view text, int32_t index, size_t& begin, size_t& stop, size_t start_offset) const;

  std::vector<added_token> tokens_;
  matcher raw_;
  matcher normalized_;
};

}  // namespace actorllm::text
