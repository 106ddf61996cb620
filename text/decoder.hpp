// Decoders (HF `decoders`): turn the token strings of an id sequence back into text. Supported: ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence. Each works on the whole list of token strings, exactly
// like HF's decode_chain, because several of them (ByteFallback runs, Fuse, Strip, Metaspace's first token)
// depend on a token's neighbours or position.
#pragma once

#include "text/pre_tokenizer.hpp"
#include "text/regex.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::text {

/// One decoding step. Implementations are immutable and thread-safe.
class decoder {
 public:
  virtual ~decoder() = default;
  /// Rewrites the list of token strings in place (HF decode_chain).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

/// Maps GPT-2 alphabet characters back to bytes and joins everything into one string (invalid UTF-8 becomes
/// U+FFFD).
class byte_level_decoder final : public decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

/// Turns the replacement character back into spaces; in the first token it is dropped unless the scheme is never.
class metaspace_decoder final : public decoder {
 public:
  metaspace_decoder(std::string replacement, prepend_scheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  prepend_scheme scheme_;
};

/// Replaces a literal or regex in every token.
class replace_decoder final : public decoder {
 public:
  replace_decoder(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  replace_decoder(regex pattern, std::string content) : regex_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string literal_;
  std::optional<regex> regex_;
  std::string content_;
};

/// Joins runs of `<0xXX>` tokens into the bytes they spell; a run that is not valid UTF-8 becomes one U+FFFD per
/// byte (HF's rule, not a per-sequence repair).
class byte_fallback_decoder final : public decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
  /// The byte a `<0xXX>` token stands for, or -1 for any other string.
  static int byte_of(std::string_view token);
};

/// Concatenates all tokens into one.
class fuse_decoder final : public decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

/// Removes up to `start` leading and `stop` trailing copies of a character from every token.
class strip_decoder final : public decoder {
 public:
  strip_decoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;  // one character, UTF-8
  size_t start_;
  size_t stop_;
};

/// Applies its steps in order.
class sequence_decoder final : public decoder {
 public:
  explicit sequence_decoder(std::vector<std::unique_ptr<decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_)
      step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<decoder>> steps_;
};

}  // namespace actorllm::text
