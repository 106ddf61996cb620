// Pre-tokenizers (HF `pre_tokenizers`): cut normalized text into the words that the BPE model tokenizes one by one.
// Supported: Split, ByteLevel, Metaspace, Digits, Sequence. Stages stream their pieces to the next stage through a
// callback instead of building lists, so encoding allocates nothing per word once its buffers are warm.
#pragma once

#include "text/regex.hpp"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace actorllm::text {

/// Receives the pieces a stage produces: a non-owning reference to a callable `void(std::string_view, bool)`.
/// The piece is only valid during the call.
class piece_sink {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, piece_sink>)
      piece_sink(F& f)  // NOLINT(google-explicit-constructor): used like a function_ref
      : object_(&f),
        call_([](void* o, std::string_view piece, bool at_start) { (*static_cast<F*>(o))(piece, at_start); }) {}
  void operator()(std::string_view piece, bool at_start) const { call_(object_, piece, at_start); }

 private:
  void* object_;
  void (*call_)(void*, std::string_view, bool);
};

/// Per-call buffers for stages that rewrite text (a stack: a stage holds its buffer while later stages run).
class pre_tokenize_scratch {
 public:
  std::string& acquire() {
    if (depth_ == buffers_.size())
      buffers_.emplace_back();  // deque: existing buffers never move
    std::string& b = buffers_[depth_++];
    b.clear();
    return b;
  }
  void release() { --depth_; }

 private:
  std::deque<std::string> buffers_;
  size_t depth_ = 0;
};

/// One pre-tokenization stage. Implementations are immutable and thread-safe.
class pre_tokenizer {
 public:
  virtual ~pre_tokenizer() = default;
  /// Passes the pieces of `piece` (non-empty, well-formed UTF-8), in order, to `out`. `at_start` says that `piece`
  /// begins at offset 0 of the text given to encode (HF's `offsets_original().0 == 0`); each output piece carries
  /// the same flag for itself.
  virtual void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                            piece_sink out) const = 0;
};

/// How a Split keeps the delimiters it finds (HF SplitDelimiterBehavior).
enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// Splits on a literal string or regex (Llama 3 and Qwen put their word regex here).
class split_pre_tokenizer final : public pre_tokenizer {
 public:
  split_pre_tokenizer(std::string literal, split_behavior behavior, bool invert)
      : literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}
  split_pre_tokenizer(regex pattern, split_behavior behavior, bool invert)
      : regex_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                    piece_sink out) const override;

 private:
  std::string literal_;
  std::optional<regex> regex_;
  split_behavior behavior_;
  bool invert_;
};

/// Maps bytes to GPT-2's printable alphabet, optionally after a space prefix and the GPT-2 word regex.
class byte_level_pre_tokenizer final : public pre_tokenizer {
 public:
  byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                    piece_sink out) const override;

 private:
  bool add_prefix_space_;
  std::optional<regex> gpt2_;
};

/// Where Metaspace puts its replacement character in front of the text.
enum class prepend_scheme { always, first, never };

/// SentencePiece-style: spaces become the replacement ("▁"), one is prepended, and words split before each "▁".
class metaspace_pre_tokenizer final : public pre_tokenizer {
 public:
  metaspace_pre_tokenizer(std::string replacement, prepend_scheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                    piece_sink out) const override;

 private:
  std::string replacement_;
  prepend_scheme scheme_;
  bool split_;
};

/// Separates numeric characters (each one alone, or runs of them) from the rest.
class digits_pre_tokenizer final : public pre_tokenizer {
 public:
  explicit digits_pre_tokenizer(bool individual_digits) : individual_digits_(individual_digits) {}
  void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                    piece_sink out) const override;

 private:
  bool individual_digits_;
};

/// Runs its stages in order: every piece of stage i goes through stage i + 1.
class sequence_pre_tokenizer final : public pre_tokenizer {
 public:
  explicit sequence_pre_tokenizer(std::vector<std::unique_ptr<pre_tokenizer>> stages) : stages_(std::move(stages)) {}
  void pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                    piece_sink out) const override {
    run(0, piece, at_start, scratch, out);
  }

 private:
  void run(size_t stage, std::string_view piece, bool at_start, pre_tokenize_scratch& scratch, piece_sink out) const;
  std::vector<std::unique_ptr<pre_tokenizer>> stages_;
};

}  // namespace actorllm::text
