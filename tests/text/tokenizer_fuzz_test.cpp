// Seeded randomized tests over every staged tokenizer: arbitrary bytes and arbitrary valid UTF-8 through encode,
// decode and the incremental detokenizer. Bounded in time so that they also run under ASan + UBSan.
#include "text/incremental_detokenizer.hpp"
#include "text/unicode.hpp"
#include "tokenizer_fixtures.hpp"
#include "util/utf8.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <random>

using actorllm::test::staged_tokenizer;
using actorllm::test::staged_tokenizer_names;
namespace text = actorllm::text;

namespace {

using clock_type = std::chrono::steady_clock;

// Stops a loop after `iterations` or `seconds`, whichever comes first (ASan builds run several times slower).
class budget {
 public:
  budget(size_t iterations, double seconds)
      : left_(iterations),
        deadline_(clock_type::now() +
                  std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds))) {}
  bool next() {
    if (left_ == 0 || ((left_ & 15) == 0 && clock_type::now() > deadline_))
      return false;
    --left_;
    ++done_;
    return true;
  }
  size_t done() const { return done_; }

 private:
  size_t left_;
  size_t done_ = 0;
  clock_type::time_point deadline_;
};

// Added-token spellings of the staged tokenizers (each tokenizer knows some of them).
const char* const special_strings[] = {"<s>",          "</s>",       "<|begin_of_text|>", "<|eot_id|>",
                                       "<|im_start|>", "<|im_end|>", "<think>",           "<unk>"};

// Random text made of pieces that exercise the pre-tokenizer regexes, normalizers and byte fallback.
class text_generator {
 public:
  text_generator(uint32_t seed, bool with_specials) : rng_(seed), with_specials_(with_specials) {}

  std::string valid_text() {
    std::string s;
    const int pieces = pick(0, 12);
    for (int i = 0; i < pieces; ++i) {
      switch (pick(0, 11)) {
        case 0:
          s += word();
          break;
        case 1:
          s += std::string(static_cast<size_t>(pick(1, 5)), " \t\n\r"[pick(0, 3)]);
          break;
        case 2:
          s += std::to_string(pick(0, 1 << 30));
          break;
        case 3:
          s += "'s'T'rE'vE'M'll'D"[pick(0, 15)];
          break;
        case 4:
          actorllm::append_code_point(s, static_cast<char32_t>(pick(0x4E00, 0x9FFF)));  // CJK
          break;
        case 5:
          actorllm::append_code_point(s, static_cast<char32_t>(pick(0x1F300, 0x1FAFF)));  // emoji
          break;
        case 6:
          actorllm::append_code_point(s, static_cast<char32_t>(pick(0x300, 0x36F)));  // combining marks
          break;
        case 7:
          actorllm::append_code_point(s, static_cast<char32_t>(pick(0x80, 0x7FF)));  // Latin, Greek, Cyrillic, ...
          break;
        case 8:
          s += any_code_point();
          break;
        case 9:
          s += "!?.,;:-_()[]{}<>|/\\\"#$%&*+=@^`~"[pick(0, 31)];
          break;
        case 10:
          s += "\xC2\x85\xC2\xA0\xE3\x80\x80\xE2\x80\xAF";  // NEL, NBSP, ideographic and narrow spaces
          break;
        default:
          if (with_specials_) {
            s += special_strings[pick(0, 7)];
          } else {
            s += word();
          }
      }
    }
    return s;
  }

  std::string random_bytes() {
    std::string s(static_cast<size_t>(pick(0, 48)), '\0');
    for (char& c : s)
      c = static_cast<char>(pick(0, 255));
    return s;
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>{lo, hi}(rng_); }
  std::mt19937& rng() { return rng_; }

 private:
  std::string word() {
    std::string w;
    const int n = pick(1, 9);
    for (int i = 0; i < n; ++i)
      w += static_cast<char>(pick(0, 3) == 0 ? pick('A', 'Z') : pick('a', 'z'));
    return w;
  }
  std::string any_code_point() {
    char32_t cp = 0;
    do {
      cp = static_cast<char32_t>(pick(1, 0x10FFFF));
    } while (cp >= 0xD800 && cp <= 0xDFFF);
    std::string s;
    actorllm::append_code_point(s, cp);
    return s;
  }

  std::mt19937 rng_;
  bool with_specials_;
};

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids)
    s += std::to_string(id) + " ";
  return s;
}

bool is_sentencepiece_style(const std::string& name) {
  return name == "llama2-tokenizer" || name == "tokenizers/mistral" || name == "stories260K";
}

// What decode(encode(s)) must give back. Byte-level tokenizers are lossless after their normalizer, which HF
// applies to the text between added tokens (never across one). The SentencePiece-style ones are lossless for text
// without "▁" and without added-token strings (HF inserts a "▁" after an added token there), which the generator
// avoids for them.
std::string expected_round_trip(const text::tokenizer& tok, const std::string& name, const std::string& s) {
  if (name != "tokenizers/qwen3")
    return s;
  std::string out;
  size_t segment = 0;
  size_t i = 0;
  auto flush = [&](size_t end) {
    std::string piece = s.substr(segment, end - segment);
    text::normalize_unicode(piece, text::normalization_form::nfc);
    out += piece;
  };
  while (i < s.size()) {
    size_t matched = 0;
    for (const char* special : special_strings) {
      const std::string_view sv{special};
      const auto id = tok.token_to_id(sv);
      if (sv.size() > matched && std::string_view{s}.substr(i).starts_with(sv) && id && tok.is_added(*id))
        matched = sv.size();
    }
    if (matched == 0) {
      ++i;
      continue;
    }
    flush(i);
    out += s.substr(i, matched);
    i += matched;
    segment = i;
  }
  flush(s.size());
  return out;
}

}  // namespace

TEST_CASE("[asan] tokenizer fuzz: random bytes and random UTF-8 through encode and decode") {
  for (const std::string& name : staged_tokenizer_names()) {
    CAPTURE(name);
    const auto& tok = staged_tokenizer(name);
    const bool spm = is_sentencepiece_style(name);
    text_generator gen{12345, !spm};
    budget b{2000, 1.2};
    size_t round_trips = 0;
    while (b.next()) {
      // Arbitrary bytes: encode repairs them to U+FFFD first; ids must be valid and decode must give UTF-8.
      const std::string bytes = gen.random_bytes();
      const auto ids = tok.encode(bytes, true);
      for (int32_t id : ids)
        REQUIRE((id >= 0 && id < tok.vocab_size()));
      const std::string decoded = tok.decode(ids, gen.pick(0, 1) == 1);
      REQUIRE(actorllm::is_valid_utf8(decoded));
      if (!spm || bytes.find("\xE2\x96\x81") == std::string::npos) {
        const std::string repaired = actorllm::to_valid_utf8(bytes);
        if (!spm || repaired.find("\xE2\x96\x81") == std::string::npos)
          CHECK(tok.decode(tok.encode(bytes, false)) == expected_round_trip(tok, name, repaired));
      }

      std::string s = gen.valid_text();
      if (spm) {
        for (size_t p = s.find("\xE2\x96\x81"); p != std::string::npos; p = s.find("\xE2\x96\x81"))
          s.erase(p, 3);
      }
      REQUIRE(actorllm::is_valid_utf8(s));
      const auto text_ids = tok.encode(s, false);
      const std::string back = tok.decode(text_ids);
      CHECK_MESSAGE(back == expected_round_trip(tok, name, s), "text: \"" << s << "\"");
      round_trips += back == expected_round_trip(tok, name, s) ? 1 : 0;
    }
    MESSAGE(name << ": " << b.done() << " random byte strings and " << b.done() << " random texts, " << round_trips
                 << " exact round trips");
    CHECK(round_trips == b.done());
  }
}

TEST_CASE("[asan] tokenizer fuzz: streamed deltas add up to the full decode") {
  for (const std::string& name : staged_tokenizer_names()) {
    CAPTURE(name);
    const auto& tok = staged_tokenizer(name);
    text_generator gen{777, true};
    budget b{1000, 1.2};
    size_t exact = 0;
    size_t compared = 0;
    while (b.next()) {
      // Either random ids (with a bias to byte-fallback and special tokens) or the ids of a random text.
      std::vector<int32_t> ids;
      if (gen.pick(0, 1) == 0) {
        const int n = gen.pick(0, 40);
        for (int i = 0; i < n; ++i) {
          const int kind = gen.pick(0, 9);
          if (kind == 0)
            ids.push_back(gen.pick(0, 2));  // <unk>, <s>, </s> (or the first byte-level tokens)
          else if (kind <= 3)
            ids.push_back(gen.pick(3, 258));  // byte tokens in SentencePiece vocabularies
          else if (kind == 4)
            ids.push_back(gen.pick(tok.vocab_size() - 300 > 0 ? tok.vocab_size() - 300 : 0, tok.vocab_size() - 1));
          else
            ids.push_back(gen.pick(0, tok.vocab_size() - 1));
        }
      } else {
        ids = tok.encode(gen.valid_text(), gen.pick(0, 1) == 1);
      }
      const bool skip = gen.pick(0, 1) == 1;
      const size_t split = ids.empty() ? 0 : static_cast<size_t>(gen.pick(0, static_cast<int>(ids.size())));
      const std::span<const int32_t> all{ids};
      const auto prompt = all.first(split);
      text::incremental_detokenizer d{tok, prompt, skip};
      std::string streamed;
      for (int32_t id : all.subspan(split)) {
        const std::string delta = d.push(id);
        REQUIRE(actorllm::is_valid_utf8(delta));
        streamed += delta;
      }
      const std::string tail = d.finish();
      REQUIRE(actorllm::is_valid_utf8(tail));
      streamed += tail;
      // The contract holds whenever the prompt's own text is a prefix of the full text (it is not when the
      // prompt ends inside a character or byte run that the generated ids complete or break).
      const std::string full = tok.decode(ids, skip);
      const std::string prompt_text = tok.decode(prompt, skip);
      if (full.starts_with(prompt_text)) {
        ++compared;
        CHECK_MESSAGE(streamed == full.substr(prompt_text.size()),
                      "skip " << skip << " split " << split << " ids " << join_ids(ids));
        exact += streamed == full.substr(prompt_text.size()) ? 1 : 0;
      }
    }
    MESSAGE(name << ": " << b.done() << " streams, " << compared << " compared with decode, " << exact << " exact");
    CHECK(exact == compared);
    CHECK(compared * 10 >= b.done() * 7);  // the comparison must cover most streams, or the test proves little
  }
}
