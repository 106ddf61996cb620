// The Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) as used by the Llama 2/3, Mistral and
// Qwen2/3 families: encode text to ids and decode ids to text with the same results as HF `tokenizers`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text {

struct tokenizer_impl;

/// An immutable loaded tokenizer. Copies are cheap (shared state) and every method may be called from any number
/// of threads at once.
class tokenizer {
 public:
  /// Loads tokenizer.json and, when present, tokenizer_config.json (special token names, add_bos_token /
  /// add_eos_token, chat_template; a chat_template.jinja file is used when the config has no template) from a
  /// model or tokenizer directory. Throws tokenizer_error naming the file and the problem (unreadable file,
  /// malformed JSON, a component or option this implementation does not support).
  static tokenizer from_directory(const std::filesystem::path& dir);

  /// Loads a tokenizer.json file and optionally a tokenizer_config.json file (empty path: none).
  static tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::filesystem::path& tokenizer_config = {});

  /// Token ids of `text`. Added/special tokens written in the text (e.g. "<|eot_id|>") are always recognized;
  /// `add_special_tokens` applies the post-processor (BOS etc.). Invalid UTF-8 in `text` is first replaced by
  /// U+FFFD, as Python does when such bytes are decoded with errors="replace".
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// The text of `ids` (HF Tokenizer::decode, without transformers' clean_up_tokenization_spaces). Ids that no
  /// token has are skipped, as HF does. The result is always well-formed UTF-8.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  /// The raw vocabulary string of `id` (e.g. "▁Hello", "ĠHello", "<0x0A>"); empty for an id no token has.
  std::string id_to_token(int32_t id) const;

  /// The id of a raw vocabulary string or added token.
  std::optional<int32_t> token_to_id(std::string_view token) const;

  /// One past the largest token id (model vocabulary plus added tokens).
  int32_t vocab_size() const;

  /// True for added tokens marked special (skipped by decode(.., skip_special_tokens = true)).
  bool is_special(int32_t id) const;

  /// True for tokens from tokenizer.json's "added_tokens" (special or not): they are matched in the text before
  /// normalization and pre-tokenization.
  bool is_added(int32_t id) const;

  /// The BOS / EOS tokens named by tokenizer_config.json, if any and known to the vocabulary.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  /// Their strings, for chat templates (empty when not configured).
  const std::string& bos_token() const;
  const std::string& eos_token() const;

  /// tokenizer_config.json "chat_template" (string form; from a list of named templates, the one named
  /// "default"), else the contents of chat_template.jinja.
  const std::optional<std::string>& chat_template() const;

  /// tokenizer_config.json "model_max_length" when it is a usable number (the 1e30 "unlimited" marker is not).
  std::optional<int64_t> model_max_length() const;

  /// For incremental decoding: true when `id` is a `<0xXX>` token that the ByteFallback decoder joins with the
  /// byte tokens next to it, so that text must not be cut between two of them.
  bool is_byte_fallback_token(int32_t id) const;

 private:
  explicit tokenizer(std::shared_ptr<const tokenizer_impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tokenizer_impl> impl_;
};

}  // namespace actorllm::text
