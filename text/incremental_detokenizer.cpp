// Incremental detokenization with prefix/read offsets.
#include "text/incremental_detokenizer.hpp"

#include "util/utf8.hpp"

#include <algorithm>

namespace actorllm::text {
namespace {
// How far back from the end of the prompt we look for context that decodes to some text; prompts ending in a
// longer run of tokens without text are rare and then cost one decode of the whole prompt.
constexpr size_t max_prompt_lookback = 64;
// Length of the longest common prefix of `text` and `context` that ends on a character boundary of `text`.
// Inside the generated text the window always extends its context exactly (read_offset only stops where the
// text is final). Only at the end of the prompt can a character or byte run still be open; there the completed
// text replaces the context's U+FFFD from the point where they differ.
size_t common_prefix_length(const std::string& text, const std::string& context) {
  const size_t limit = std::min(text.size(), context.size());
  size_t n = 0;
  while (n < limit && text[n] == context[n])
    ++n;
  if (n == context.size())
    return n;
  while (n > 0 && n < text.size() && is_utf8_continuation(static_cast<unsigned char>(text[n])))
    --n;
  return n;
}

}  // namespace

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok, std::span<const int32_t> prompt_ids,
                                                 bool skip_special_tokens)
    : tok_(tok),
      skip_special_(skip_special_tokens),
      ids_(prompt_ids.begin(), prompt_ids.end()),
      prompt_size_(prompt_ids.size()) {
  // prefix_offset: back far enough that the context decodes to some text (or to the start of the prompt).
  const size_t n = ids_.size();
  size_t prefix = n;
  std::string context;
  while (prefix > 0 && n - prefix < max_prompt_lookback) {
    --prefix;
    // ByteFallback turns a whole run of byte tokens into U+FFFDs when any part of it is invalid, so a window that
    // starts inside a run could decode the run's later bytes differently from the full text.
    if (inside_byte_run(prefix))
      continue;
    context = decode_range(prefix, n);
    if (!context.empty())
      break;
  }
  if (context.empty() && prefix > 0) {
    prefix = 0;
    context = decode_range(0, n);
  }
  prefix_offset_ = prefix;
  read_offset_ = n;
  prefix_text_ = std::move(context);
}

std::string incremental_detokenizer::decode_range(size_t begin, size_t end) const {
  return tok_.decode(std::span<const int32_t>{ids_}.subspan(begin, end - begin), skip_special_);
}

bool incremental_detokenizer::inside_byte_run(size_t pos) const {
  auto kept = [&](int32_t id) { return !(skip_special_ && tok_.is_special(id)); };
  size_t next = pos;
  while (next < ids_.size() && !kept(ids_[next]))
    ++next;
  if (next == ids_.size() || !tok_.is_byte_fallback_token(ids_[next]))
    return false;
  for (size_t i = pos; i > 0; --i) {
    if (kept(ids_[i - 1]))
      return tok_.is_byte_fallback_token(ids_[i - 1]);
  }
  return false;
}

bool incremental_detokenizer::is_cut_point(size_t end, const std::string& text_up_to_end) const {
  // A trailing U+FFFD may be a character whose remaining bytes are still to come (byte-level BPE).
  if (std::string_view{text_up_to_end}.ends_with(replacement_character))
    return false;
  // ByteFallback decodes a whole run of <0xXX> tokens at once; a run may not be cut.
  for (size_t i = end; i > 0; --i) {
    const int32_t id = ids_[i - 1];
    if (skip_special_ && tok_.is_special(id))
      continue;  // removed before decoding: the tokens around it are adjacent
    return !tok_.is_byte_fallback_token(id);
  }
  return true;
}

void incremental_detokenizer::advance(size_t end, const std::string& window_text) {
  // The newly read tokens become the context of the next window when they decode to some text on their own;
  // otherwise the window keeps its older context.
  std::string read_text = decode_range(read_offset_, end);
  if (!read_text.empty()) {
    prefix_offset_ = read_offset_;
    prefix_text_ = std::move(read_text);
  } else {
    prefix_text_ = window_text;
  }
  read_offset_ = end;
}

std::string incremental_detokenizer::push(int32_t id) {
  ids_.push_back(id);
  const size_t end = ids_.size();
  std::string text = decode_range(prefix_offset_, end);
  if (text.size() <= prefix_text_.size() || !is_cut_point(end, text))
    return {};
  std::string delta = text.substr(common_prefix_length(text, prefix_text_));
  advance(end, text);
  return delta;
}

std::string incremental_detokenizer::finish() {
  const size_t end = ids_.size();
  if (end == read_offset_)
    return {};
  std::string text = decode_range(prefix_offset_, end);
  std::string delta = text.substr(common_prefix_length(text, prefix_text_));
  advance(end, text);
  return delta;
}

}  // namespace actorllm::text
