// Decoder steps, ported from HF tokenizers' decoders so that decode() output matches theirs byte for byte.
#include "text/decoder.hpp"
#include "util/hex.hpp"

#include "text/byte_level.hpp"
#include "text/normalizer.hpp"
#include "util/utf8.hpp"

namespace actorllm::text {

void byte_level_decoder::decode_chain(std::vector<std::string>& tokens) const {
  const byte_level_alphabet& alphabet = byte_level_alphabet::get();
  std::string bytes;
  for (const std::string& t : tokens) {
    const size_t mark = bytes.size();
    // A token with a character outside the alphabet (an added token such as "<|im_start|>" is inside it, but
    // e.g. CJK special tokens are not) contributes its own UTF-8 bytes.
    if (!alphabet.decode(t, bytes)) {
      bytes.resize(mark);
      bytes += t;
    }
  }
  std::string text;
  text.reserve(bytes.size());
  append_utf8_lossy(text, bytes);
  tokens.assign(1, std::move(text));
}

void metaspace_decoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i == 0 && scheme_ != prepend_scheme::never)
      replace_all(tokens[i], replacement_, "");
    else
      replace_all(tokens[i], replacement_, " ");
  }
}

void replace_decoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& t : tokens) {
    if (!regex_) {
      replace_all(t, literal_, content_);
      continue;
    }
    std::string out;
    size_t last = 0;
    regex_->for_each_match(t, [&](size_t b, size_t e) {
      out.append(t, last, b - last);
      out.append(content_);
      last = e;
    });
    out.append(t, last, std::string::npos);
    t = std::move(out);
  }
}

int byte_fallback_decoder::byte_of(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>')
    return -1;
  // Rust's u8::from_str_radix(.., 16) accepts either case.
  constexpr auto hex = hex_digit_value;
  const int hi = hex(token[3]);
  const int lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void byte_fallback_decoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  auto flush = [&] {
    if (run.empty())
      return;
    if (is_valid_utf8(run)) {
      out.push_back(run);
    } else {
      for (size_t k = 0; k < run.size(); ++k)
        out.emplace_back(replacement_character);
    }
    run.clear();
  };
  for (std::string& t : tokens) {
    const int b = byte_of(t);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

void fuse_decoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const std::string& t : tokens)
    all += t;
  tokens.assign(1, std::move(all));
}

void strip_decoder::decode_chain(std::vector<std::string>& tokens) const {
  const std::string_view c = content_;
  for (std::string& t : tokens) {
    std::string_view v = t;
    for (size_t k = 0; k < start_ && v.starts_with(c); ++k)
      v.remove_prefix(c.size());
    for (size_t k = 0; k < stop_ && v.ends_with(c); ++k)
      v.remove_suffix(c.size());
    if (v.size() != t.size())
      t = std::string{v};
  }
}

}  // namespace actorllm::text
