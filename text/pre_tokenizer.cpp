// Pre-tokenizer stages. Splitting follows HF's NormalizedString::split: the text is covered by alternating
// delimiter / non-delimiter spans, the behavior folds them into pieces, and empty pieces are dropped.
#include "text/pre_tokenizer.hpp"

#include "text/byte_level.hpp"
#include "text/unicode.hpp"
#include "util/utf8.hpp"

namespace actorllm::text {
namespace {

// The GPT-2 word regex that ByteLevel applies when use_regex is set.
constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Folds the spans of one text into pieces according to a split_behavior, streaming: HF's folds only ever merge a
// span with its immediate neighbour, so one pending span is all the state needed.
class span_folder {
 public:
  span_folder(std::string_view text, bool at_start, split_behavior behavior, piece_sink out)
      : text_(text), at_start_(at_start), behavior_(behavior), out_(out) {}

  void add(size_t begin, size_t end, bool is_match) {
    switch (behavior_) {
      case split_behavior::isolated:
        emit(begin, end);
        break;
      case split_behavior::removed:
        if (!is_match)
          emit(begin, end);
        break;
      case split_behavior::contiguous:
        if (has_pending_ && is_match == previous_match_) {
          pending_end_ = end;
        } else {
          flush();
          hold(begin, end);
        }
        break;
      case split_behavior::merged_with_previous:
        if (has_pending_ && is_match && !previous_match_) {
          pending_end_ = end;
        } else {
          flush();
          hold(begin, end);
        }
        break;
      case split_behavior::merged_with_next:
        // A delimiter joins the piece that follows it, unless that piece is a delimiter too.
        if (has_pending_ && previous_match_ && !is_match) {
          emit(pending_begin_, end);
          has_pending_ = false;
        } else {
          flush();
          hold(begin, end);
        }
        break;
    }
    previous_match_ = is_match;
  }

  void finish() { flush(); }

 private:
  void hold(size_t begin, size_t end) {
    has_pending_ = true;
    pending_begin_ = begin;
    pending_end_ = end;
  }
  void flush() {
    if (has_pending_)
      emit(pending_begin_, pending_end_);
    has_pending_ = false;
  }
  void emit(size_t begin, size_t end) {
    if (end > begin)
      out_(text_.substr(begin, end - begin), at_start_ && begin == 0);
  }

  std::string_view text_;
  bool at_start_;
  split_behavior behavior_;
  piece_sink out_;
  bool has_pending_ = false;
  bool previous_match_ = false;
  size_t pending_begin_ = 0;
  size_t pending_end_ = 0;
};

// Feeds the spans around each match [b, e) of `find_matches` (called with a callback) to `folder`.
template <class FindMatches>
void split_spans(std::string_view text, bool invert, span_folder& folder, FindMatches&& find_matches) {
  size_t previous = 0;
  find_matches([&](size_t b, size_t e) {
    if (previous != b)
      folder.add(previous, b, invert);
    folder.add(b, e, !invert);
    previous = e;
  });
  if (previous != text.size())
    folder.add(previous, text.size(), invert);
  folder.finish();
}

template <class F>
void for_each_literal(std::string_view text, std::string_view literal, F&& f) {
  size_t pos = text.find(literal);
  while (pos != std::string_view::npos) {
    f(pos, pos + literal.size());
    pos = text.find(literal, pos + literal.size());
  }
}

}  // namespace

void split_pre_tokenizer::pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& /*scratch*/,
                                       piece_sink out) const {
  span_folder folder{piece, at_start, behavior_, out};
  if (regex_) {
    split_spans(piece, invert_, folder, [&](auto&& f) { regex_->for_each_match(piece, f); });
  } else {
    split_spans(piece, invert_, folder, [&](auto&& f) { for_each_literal(piece, literal_, f); });
  }
}

byte_level_pre_tokenizer::byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space) {
  if (use_regex)
    gpt2_ = regex::compile(gpt2_pattern, "ByteLevel pre_tokenizer");
}

void byte_level_pre_tokenizer::pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                                            piece_sink out) const {
  const byte_level_alphabet& alphabet = byte_level_alphabet::get();
  std::string_view text = piece;
  const bool prefix = add_prefix_space_ && !piece.starts_with(' ');
  if (prefix) {
    std::string& b = scratch.acquire();
    b.reserve(piece.size() + 1);
    b += ' ';
    b += piece;
    text = b;
  }
  std::string& mapped = scratch.acquire();
  auto emit = [&](std::string_view sub, bool sub_at_start) {
    mapped.clear();
    alphabet.encode(sub, mapped);
    out(mapped, sub_at_start);
  };
  if (gpt2_) {
    span_folder folder{text, at_start, split_behavior::isolated, piece_sink{emit}};
    split_spans(text, false, folder, [&](auto&& f) { gpt2_->for_each_match(text, f); });
  } else {
    emit(text, at_start);
  }
  scratch.release();
  if (prefix)
    scratch.release();
}

void metaspace_pre_tokenizer::pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                                           piece_sink out) const {
  std::string& text = scratch.acquire();
  text.reserve(piece.size() + replacement_.size() * 2);
  for (char c : piece) {
    if (c == ' ')
      text += replacement_;
    else
      text += c;
  }
  const bool needs_prefix = !std::string_view{text}.starts_with(replacement_);
  if (needs_prefix && (scheme_ == prepend_scheme::always || (scheme_ == prepend_scheme::first && at_start)))
    text.insert(0, replacement_);
  if (split_) {
    span_folder folder{text, at_start, split_behavior::merged_with_next, out};
    split_spans(text, false, folder, [&](auto&& f) { for_each_literal(text, replacement_, f); });
  } else {
    out(text, at_start);
  }
  scratch.release();
}

void digits_pre_tokenizer::pre_tokenize(std::string_view piece, bool at_start, pre_tokenize_scratch& /*scratch*/,
                                        piece_sink out) const {
  span_folder folder{piece, at_start, individual_digits_ ? split_behavior::isolated : split_behavior::contiguous, out};
  // HF's char-predicate pattern: every numeric character is its own delimiter match.
  split_spans(piece, false, folder, [&](auto&& f) {
    size_t i = 0;
    while (i < piece.size()) {
      const size_t begin = i;
      const auto c = static_cast<unsigned char>(piece[i]);
      const bool numeric = c < 0x80 ? (c >= '0' && c <= '9') : is_numeric(next_code_point(piece, i));
      if (c < 0x80)
        ++i;
      if (numeric)
        f(begin, i);
    }
  });
}

void sequence_pre_tokenizer::run(size_t stage, std::string_view piece, bool at_start, pre_tokenize_scratch& scratch,
                                 piece_sink out) const {
  if (stage == stages_.size()) {
    out(piece, at_start);
    return;
  }
  auto next = [&](std::string_view sub, bool sub_at_start) { run(stage + 1, sub, sub_at_start, scratch, out); };
  stages_[stage]->pre_tokenize(piece, at_start, scratch, piece_sink{next});
}

}  // namespace actorllm::text
