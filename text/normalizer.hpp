// Normalizers (HF `normalizers`): rewrite the text of each segment between added tokens before pre-tokenization.
// Supported: Prepend, Replace, NFC/NFD/NFKC/NFKD, Sequence.
#pragma once

#include "text/regex.hpp"
#include "text/unicode.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::text {

/// One normalization step. Implementations are immutable and thread-safe.
class normalizer {
 public:
  virtual ~normalizer() = default;
  /// Rewrites `s` (well-formed UTF-8) in place.
  virtual void normalize(std::string& s) const = 0;
};

/// Prepends a fixed string to non-empty text (Llama 2's "▁").
class prepend_normalizer final : public normalizer {
 public:
  explicit prepend_normalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override;

 private:
  std::string prefix_;
};

/// Replaces every non-overlapping match of a literal string or a regex, left to right.
class replace_normalizer final : public normalizer {
 public:
  /// Literal pattern (non-empty).
  replace_normalizer(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  /// Regex pattern.
  replace_normalizer(regex pattern, std::string content) : regex_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& s) const override;

 private:
  std::string literal_;
  std::optional<regex> regex_;
  std::string content_;
};

/// Unicode normalization (NFC for Qwen).
class unicode_normalizer final : public normalizer {
 public:
  explicit unicode_normalizer(normalization_form form) : form_(form) {}
  void normalize(std::string& s) const override { normalize_unicode(s, form_); }

 private:
  normalization_form form_;
};

/// Applies its steps in order.
class sequence_normalizer final : public normalizer {
 public:
  explicit sequence_normalizer(std::vector<std::unique_ptr<normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& s) const override {
    for (const auto& step : steps_)
      step->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<normalizer>> steps_;
};

/// Replaces every occurrence of `from` (non-empty) in `s` by `to`, left to right without overlaps.
void replace_all(std::string& s, std::string_view from, std::string_view to);

}  // namespace actorllm::text
