// The state behind text::tokenizer: the HF pipeline (added tokens, normalizer, pre-tokenizer, BPE model,
// post-processor, decoder) plus what tokenizer_config.json adds. Private to text/: built by the loader
// (tokenizer_loader.cpp), used by tokenizer.cpp.
#pragma once

#include "text/added_vocabulary.hpp"
#include "text/bpe_model.hpp"
#include "text/decoder.hpp"
#include "text/lookup_tables.hpp"
#include "text/normalizer.hpp"
#include "text/pre_tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::text {

/// One element of a TemplateProcessing "single" template: the encoded sequence, or fixed special-token ids.
struct template_piece {
  bool is_sequence = false;
  std::vector<int32_t> ids;
};

struct tokenizer_impl {
  std::unique_ptr<bpe_model> model;
  std::unique_ptr<normalizer> norm;    // may be null
  std::unique_ptr<pre_tokenizer> pre;  // may be null
  std::unique_ptr<decoder> dec;        // may be null: tokens are then joined with spaces
  added_vocabulary added;
  token_id_table added_ids;  // added token content -> id (looked up before the model's vocabulary, as HF does)
  /// Templates applied in order when add_special_tokens is set (empty: the ids are returned as they are).
  std::vector<std::vector<template_piece>> templates;

  /// Per id: the string decode uses (added token content first, then the model's), or null.
  std::vector<const std::string*> id_strings;
  std::vector<uint8_t> special;        // per id
  std::vector<uint8_t> added_token;    // per id
  std::vector<uint8_t> byte_fallback;  // per id: a <0xXX> token and the decoder has ByteFallback

  std::string bos_token;
  std::string eos_token;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<std::string> chat_template;
  std::optional<int64_t> model_max_length;
};

}  // namespace actorllm::text
