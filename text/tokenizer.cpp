// Encoding and decoding through the loaded HF pipeline. The order of the steps is HF's:
// added tokens (raw text) -> normalizer -> added tokens (normalized text) -> pre-tokenizer -> BPE -> post-processor.
#include "text/tokenizer.hpp"

#include "text/tokenizer_impl.hpp"
#include "util/utf8.hpp"

namespace actorllm::text {
namespace {

// Per-call buffers (encode may run on many threads; nothing here is shared).
struct encode_state {
  bpe_scratch bpe;
  pre_tokenize_scratch pre;
  std::string normalized;
};

void encode_segment(const tokenizer_impl& impl, std::string_view segment, bool at_start, encode_state& state,
                    std::vector<int32_t>& ids) {
  std::string_view text = segment;
  if (impl.norm) {
    state.normalized.assign(segment);
    impl.norm->normalize(state.normalized);
    text = state.normalized;
  }
  auto to_model = [&](std::string_view word, bool /*word_at_start*/) { impl.model->tokenize(word, ids, state.bpe); };
  impl.added.split(
      text, true, [&](int32_t id) { ids.push_back(id); },
      [&](size_t begin, size_t end) {
        const std::string_view piece = text.substr(begin, end - begin);
        const bool piece_at_start = at_start && begin == 0;
        if (impl.pre)
          impl.pre->pre_tokenize(piece, piece_at_start, state.pre, piece_sink{to_model});
        else
          impl.model->tokenize(piece, ids, state.bpe);
      });
}

}  // namespace

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const tokenizer_impl& impl = *impl_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_state state;
  impl.added.split(
      text, false, [&](int32_t id) { ids.push_back(id); },
      [&](size_t begin, size_t end) { encode_segment(impl, text.substr(begin, end - begin), begin == 0, state, ids); });
  if (!add_special_tokens || impl.templates.empty())
    return ids;
  for (const auto& single : impl.templates) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const template_piece& piece : single) {
      if (piece.is_sequence)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), piece.ids.begin(), piece.ids.end());
    }
    ids = std::move(out);
  }
  return ids;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const tokenizer_impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl.id_strings.size())
      continue;
    const std::string* s = impl.id_strings[static_cast<size_t>(id)];
    if (s == nullptr || (skip_special_tokens && impl.special[static_cast<size_t>(id)] != 0))
      continue;
    tokens.push_back(*s);
  }
  if (impl.dec)
    impl.dec->decode_chain(tokens);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    // Without a decoder HF joins the tokens with spaces.
    if (!impl.dec && i > 0)
      text += ' ';
    text += tokens[i];
  }
  // Vocabulary strings are well-formed UTF-8 in practice; repairing here keeps the promise for any file.
  if (!impl.dec && !is_valid_utf8(text))
    text = to_valid_utf8(text);
  return text;
}

std::string tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_strings.size() ||
      impl_->id_strings[static_cast<size_t>(id)] == nullptr)
    return {};
  return *impl_->id_strings[static_cast<size_t>(id)];
}

std::optional<int32_t> tokenizer::token_to_id(std::string_view token) const {
  int32_t id = impl_->added_ids.find(token);
  if (id < 0)
    id = impl_->model->token_to_id(token);
  if (id < 0)
    return std::nullopt;
  return id;
}

int32_t tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_strings.size()); }

bool tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[static_cast<size_t>(id)] != 0;
}

bool tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->added_token.size() &&
         impl_->added_token[static_cast<size_t>(id)] != 0;
}

std::optional<int32_t> tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& tokenizer::eos_token() const { return impl_->eos_token; }
const std::optional<std::string>& tokenizer::chat_template() const { return impl_->chat_template; }
std::optional<int64_t> tokenizer::model_max_length() const { return impl_->model_max_length; }

bool tokenizer::is_byte_fallback_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->byte_fallback.size() &&
         impl_->byte_fallback[static_cast<size_t>(id)] != 0;
}

}  // namespace actorllm::text
