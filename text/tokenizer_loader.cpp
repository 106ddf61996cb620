// Reads tokenizer.json (simdjson DOM) and tokenizer_config.json (simdjson On-Demand: transformers writes
// 1e30-sized integers there, which the DOM parser of simdjson 3.0 rejects) into a tokenizer_impl. Every option
// that changes behaviour is either implemented or refused by name; nothing is silently ignored.
#include "text/tokenizer.hpp"
#include "text/tokenizer_error.hpp"
#include "text/tokenizer_impl.hpp"
#include "util/utf8.hpp"

#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <unordered_map>

namespace actorllm::text {
namespace {

namespace dom = simdjson::dom;
namespace ondemand = simdjson::ondemand;

std::string in_quotes(std::string_view s) {
  // Appending piecewise (rather than "\"" + ... + "\"") also avoids a GCC 12 -Wrestrict false positive.
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q += s;
  q += '"';
  return q;
}

// Error context: the file being read. Messages read "<file>: <problem> (at <json path>)".
class reader {
 public:
  explicit reader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(std::string_view where, const std::string& what) const {
    std::string message = file_ + ": " + what;
    if (!where.empty())
      message += " (at " + std::string{where} + ")";
    throw tokenizer_error(message);
  }

  dom::object object_of(dom::element e, std::string_view where) const {
    dom::object o;
    if (e.get(o) != simdjson::SUCCESS)
      fail(where, "expected a JSON object");
    return o;
  }
  dom::array array_of(dom::element e, std::string_view where) const {
    dom::array a;
    if (e.get(a) != simdjson::SUCCESS)
      fail(where, "expected a JSON array");
    return a;
  }
  std::string_view string_of(dom::element e, std::string_view where) const {
    std::string_view s;
    if (e.get(s) != simdjson::SUCCESS)
      fail(where, "expected a string");
    return s;
  }

  // Required member.
  dom::element member(dom::object o, std::string_view key, std::string_view where) const {
    dom::element e;
    if (o.at_key(key).get(e) != simdjson::SUCCESS)
      fail(where, "missing field " + in_quotes(key));
    return e;
  }
  // Optional member: false when absent or null.
  bool optional_member(dom::object o, std::string_view key, dom::element& e) const {
    return o.at_key(key).get(e) == simdjson::SUCCESS && !e.is_null();
  }
  std::string_view string_member(dom::object o, std::string_view key, std::string_view where) const {
    return string_of(member(o, key, where), std::string{where} + "." + std::string{key});
  }
  std::optional<std::string> optional_string(dom::object o, std::string_view key, std::string_view where) const {
    dom::element e;
    if (!optional_member(o, key, e))
      return std::nullopt;
    return std::string{string_of(e, std::string{where} + "." + std::string{key})};
  }
  bool bool_member(dom::object o, std::string_view key, std::string_view where, bool fallback) const {
    dom::element e;
    if (!optional_member(o, key, e))
      return fallback;
    bool b = false;
    if (e.get(b) != simdjson::SUCCESS)
      fail(std::string{where} + "." + std::string{key}, "expected true or false");
    return b;
  }
  uint64_t uint_member(dom::object o, std::string_view key, std::string_view where, uint64_t fallback) const {
    dom::element e;
    if (!optional_member(o, key, e))
      return fallback;
    uint64_t v = 0;
    if (e.get(v) != simdjson::SUCCESS)
      fail(std::string{where} + "." + std::string{key}, "expected a non-negative integer");
    return v;
  }
  // Refuses members this implementation does not know: they may carry behaviour we would silently drop.
  void allow_only(dom::object o, std::string_view where, std::string_view component,
                  std::initializer_list<std::string_view> known) const {
    for (auto field : o) {
      if (std::find(known.begin(), known.end(), field.key) == known.end())
        fail(where, "unsupported " + std::string{component} + " option " + in_quotes(field.key));
    }
  }
  std::string_view type_of(dom::object o, std::string_view where, std::string_view component) const {
    dom::element e;
    if (o.at_key("type").get(e) != simdjson::SUCCESS)
      fail(where, std::string{component} + " has no \"type\"");
    return string_of(e, std::string{where} + ".type");
  }

 private:
  std::string file_;
};

// Ids index dense per-id tables; real vocabularies stay far below this (the largest are ~260k).
constexpr uint64_t max_token_id = (uint64_t{1} << 24) - 1;

std::string at(std::string_view where, size_t index) { return std::string{where} + "[" + std::to_string(index) + "]"; }
std::string at(std::string_view where, std::string_view key) { return std::string{where} + "." + std::string{key}; }

// A {"String": ...} or {"Regex": ...} pattern.
struct pattern_spec {
  bool is_regex = false;
  std::string text;
};

pattern_spec read_pattern(const reader& r, dom::element e, std::string_view where) {
  const dom::object o = r.object_of(e, where);
  pattern_spec p;
  size_t count = 0;
  for (auto field : o) {
    ++count;
    if (field.key == "String") {
      p.text = std::string{r.string_of(field.value, at(where, "String"))};
    } else if (field.key == "Regex") {
      p.is_regex = true;
      p.text = std::string{r.string_of(field.value, at(where, "Regex"))};
    } else {
      r.fail(where, "unsupported pattern kind " + in_quotes(field.key) + " (expected \"String\" or \"Regex\")");
    }
  }
  if (count != 1)
    r.fail(where, "a pattern needs exactly one of \"String\" or \"Regex\"");
  if (!p.is_regex && p.text.empty())
    r.fail(where, "empty String pattern");
  return p;
}

regex compile_pattern(const reader& r, const pattern_spec& p, std::string_view where) {
  return regex::compile(p.text, r.file() + ": " + std::string{where});
}

std::string single_character(const reader& r, dom::object o, std::string_view key, std::string_view where) {
  const std::string_view s = r.string_member(o, key, where);
  size_t i = 0;
  if (s.empty() || utf8_sequence_length(s, 0) != s.size() || (next_code_point(s, i), i != s.size()))
    r.fail(at(where, key), "expected exactly one character, got " + in_quotes(s));
  return std::string{s};
}

// Metaspace options, shared by the pre-tokenizer and the decoder (HF reads both with one helper).
struct metaspace_spec {
  std::string replacement;
  prepend_scheme scheme = prepend_scheme::always;
  bool split = true;
};

metaspace_spec read_metaspace(const reader& r, dom::object o, std::string_view where, std::string_view component) {
  r.allow_only(o, where, component, {"type", "replacement", "add_prefix_space", "prepend_scheme", "split", "str_rep"});
  metaspace_spec m;
  m.replacement = single_character(r, o, "replacement", where);
  std::optional<prepend_scheme> scheme;
  if (auto s = r.optional_string(o, "prepend_scheme", where)) {
    if (*s == "always")
      scheme = prepend_scheme::always;
    else if (*s == "first")
      scheme = prepend_scheme::first;
    else if (*s == "never")
      scheme = prepend_scheme::never;
    else
      r.fail(at(where, "prepend_scheme"), "unsupported prepend_scheme " + in_quotes(*s));
  }
  // Files from before prepend_scheme existed say add_prefix_space instead (HF's legacy mapping).
  dom::element legacy;
  if (r.optional_member(o, "add_prefix_space", legacy)) {
    if (!r.bool_member(o, "add_prefix_space", where, true))
      scheme = prepend_scheme::never;
    else if (!scheme)
      scheme = prepend_scheme::always;
  }
  m.scheme = scheme.value_or(prepend_scheme::always);
  m.split = r.bool_member(o, "split", where, true);
  return m;
}

std::unique_ptr<normalizer> read_normalizer(const reader& r, dom::element e, std::string_view where) {
  if (e.is_null())
    return nullptr;
  const dom::object o = r.object_of(e, where);
  const std::string_view type = r.type_of(o, where, "normalizer");
  if (type == "Sequence") {
    r.allow_only(o, where, "Sequence normalizer", {"type", "normalizers"});
    std::vector<std::unique_ptr<normalizer>> steps;
    size_t i = 0;
    for (dom::element step : r.array_of(r.member(o, "normalizers", where), at(where, "normalizers"))) {
      auto n = read_normalizer(r, step, at(at(where, "normalizers"), i++));
      if (n)
        steps.push_back(std::move(n));
    }
    return std::make_unique<sequence_normalizer>(std::move(steps));
  }
  if (type == "Prepend") {
    r.allow_only(o, where, "Prepend normalizer", {"type", "prepend"});
    return std::make_unique<prepend_normalizer>(std::string{r.string_member(o, "prepend", where)});
  }
  if (type == "Replace") {
    r.allow_only(o, where, "Replace normalizer", {"type", "pattern", "content"});
    const pattern_spec p = read_pattern(r, r.member(o, "pattern", where), at(where, "pattern"));
    std::string content{r.string_member(o, "content", where)};
    if (p.is_regex)
      return std::make_unique<replace_normalizer>(compile_pattern(r, p, where), std::move(content));
    return std::make_unique<replace_normalizer>(p.text, std::move(content));
  }
  const std::pair<std::string_view, normalization_form> forms[] = {{"NFC", normalization_form::nfc},
                                                                   {"NFD", normalization_form::nfd},
                                                                   {"NFKC", normalization_form::nfkc},
                                                                   {"NFKD", normalization_form::nfkd}};
  for (const auto& [name, form] : forms) {
    if (type == name) {
      r.allow_only(o, where, std::string{name} + " normalizer", {"type"});
      return std::make_unique<unicode_normalizer>(form);
    }
  }
  r.fail(where, "unsupported normalizer type " + in_quotes(type));
}

split_behavior read_behavior(const reader& r, std::string_view s, std::string_view where) {
  if (s == "Removed")
    return split_behavior::removed;
  if (s == "Isolated")
    return split_behavior::isolated;
  if (s == "MergedWithPrevious")
    return split_behavior::merged_with_previous;
  if (s == "MergedWithNext")
    return split_behavior::merged_with_next;
  if (s == "Contiguous")
    return split_behavior::contiguous;
  r.fail(where, "unsupported Split behavior " + in_quotes(s));
}

std::unique_ptr<pre_tokenizer> read_pre_tokenizer(const reader& r, dom::element e, std::string_view where) {
  if (e.is_null())
    return nullptr;
  const dom::object o = r.object_of(e, where);
  const std::string_view type = r.type_of(o, where, "pre_tokenizer");
  if (type == "Sequence") {
    r.allow_only(o, where, "Sequence pre_tokenizer", {"type", "pretokenizers"});
    std::vector<std::unique_ptr<pre_tokenizer>> stages;
    size_t i = 0;
    for (dom::element stage : r.array_of(r.member(o, "pretokenizers", where), at(where, "pretokenizers"))) {
      auto p = read_pre_tokenizer(r, stage, at(at(where, "pretokenizers"), i++));
      if (p)
        stages.push_back(std::move(p));
    }
    return std::make_unique<sequence_pre_tokenizer>(std::move(stages));
  }
  if (type == "Split") {
    r.allow_only(o, where, "Split pre_tokenizer", {"type", "pattern", "behavior", "invert"});
    const pattern_spec p = read_pattern(r, r.member(o, "pattern", where), at(where, "pattern"));
    const split_behavior b = read_behavior(r, r.string_member(o, "behavior", where), at(where, "behavior"));
    const bool invert = r.bool_member(o, "invert", where, false);
    if (p.is_regex)
      return std::make_unique<split_pre_tokenizer>(compile_pattern(r, p, where), b, invert);
    return std::make_unique<split_pre_tokenizer>(p.text, b, invert);
  }
  if (type == "ByteLevel") {
    // trim_offsets only affects offsets, which encode() does not return.
    r.allow_only(o, where, "ByteLevel pre_tokenizer", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<byte_level_pre_tokenizer>(r.bool_member(o, "add_prefix_space", where, true),
                                                      r.bool_member(o, "use_regex", where, true));
  }
  if (type == "Metaspace") {
    metaspace_spec m = read_metaspace(r, o, where, "Metaspace pre_tokenizer");
    return std::make_unique<metaspace_pre_tokenizer>(std::move(m.replacement), m.scheme, m.split);
  }
  if (type == "Digits") {
    r.allow_only(o, where, "Digits pre_tokenizer", {"type", "individual_digits"});
    return std::make_unique<digits_pre_tokenizer>(r.bool_member(o, "individual_digits", where, false));
  }
  r.fail(where, "unsupported pre_tokenizer type " + in_quotes(type));
}

struct decoder_traits {
  bool byte_fallback = false;
};

std::unique_ptr<decoder> read_decoder(const reader& r, dom::element e, std::string_view where, decoder_traits& traits) {
  if (e.is_null())
    return nullptr;
  const dom::object o = r.object_of(e, where);
  const std::string_view type = r.type_of(o, where, "decoder");
  if (type == "Sequence") {
    r.allow_only(o, where, "Sequence decoder", {"type", "decoders"});
    std::vector<std::unique_ptr<decoder>> steps;
    size_t i = 0;
    for (dom::element step : r.array_of(r.member(o, "decoders", where), at(where, "decoders"))) {
      auto d = read_decoder(r, step, at(at(where, "decoders"), i++), traits);
      if (d)
        steps.push_back(std::move(d));
    }
    return std::make_unique<sequence_decoder>(std::move(steps));
  }
  if (type == "ByteLevel") {
    // The ByteLevel decoder's options only concern offsets; decoding is the alphabet mapping either way.
    r.allow_only(o, where, "ByteLevel decoder", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<byte_level_decoder>();
  }
  if (type == "Metaspace") {
    metaspace_spec m = read_metaspace(r, o, where, "Metaspace decoder");
    return std::make_unique<metaspace_decoder>(std::move(m.replacement), m.scheme);
  }
  if (type == "Replace") {
    r.allow_only(o, where, "Replace decoder", {"type", "pattern", "content"});
    const pattern_spec p = read_pattern(r, r.member(o, "pattern", where), at(where, "pattern"));
    std::string content{r.string_member(o, "content", where)};
    if (p.is_regex)
      return std::make_unique<replace_decoder>(compile_pattern(r, p, where), std::move(content));
    return std::make_unique<replace_decoder>(p.text, std::move(content));
  }
  if (type == "ByteFallback") {
    r.allow_only(o, where, "ByteFallback decoder", {"type"});
    traits.byte_fallback = true;
    return std::make_unique<byte_fallback_decoder>();
  }
  if (type == "Fuse") {
    r.allow_only(o, where, "Fuse decoder", {"type"});
    return std::make_unique<fuse_decoder>();
  }
  if (type == "Strip") {
    r.allow_only(o, where, "Strip decoder", {"type", "content", "start", "stop"});
    std::string content = single_character(r, o, "content", where);
    return std::make_unique<strip_decoder>(std::move(content), r.uint_member(o, "start", where, 0),
                                           r.uint_member(o, "stop", where, 0));
  }
  r.fail(where, "unsupported decoder type " + in_quotes(type));
}

// The model: BPE only.
std::unique_ptr<bpe_model> read_model(const reader& r, dom::element e) {
  const std::string where = "model";
  const dom::object o = r.object_of(e, where);
  dom::element type_element;
  if (o.at_key("type").get(type_element) == simdjson::SUCCESS) {
    const std::string_view type = r.string_of(type_element, "model.type");
    if (type != "BPE")
      r.fail(where, "unsupported model type " + in_quotes(type) + " (only BPE is implemented)");
  }
  r.allow_only(o, where, "BPE model",
               {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                "byte_fallback", "ignore_merges", "vocab", "merges"});
  dom::element dropout;
  if (r.optional_member(o, "dropout", dropout)) {
    double d = 0;
    if (dropout.get(d) != simdjson::SUCCESS)
      r.fail("model.dropout", "expected a number or null");
    // Dropout makes encoding random (a training-time augmentation); 0 is the same as none.
    if (d != 0.0)
      r.fail("model.dropout", "unsupported BPE dropout " + std::to_string(d));
  }
  bpe_options options;
  options.unk_token = r.optional_string(o, "unk_token", where);
  options.continuing_subword_prefix = r.optional_string(o, "continuing_subword_prefix", where).value_or("");
  options.end_of_word_suffix = r.optional_string(o, "end_of_word_suffix", where).value_or("");
  options.fuse_unk = r.bool_member(o, "fuse_unk", where, false);
  options.byte_fallback = r.bool_member(o, "byte_fallback", where, false);
  options.ignore_merges = r.bool_member(o, "ignore_merges", where, false);
  auto model = std::make_unique<bpe_model>(std::move(options));

  const dom::object vocab = r.object_of(r.member(o, "vocab", where), "model.vocab");
  for (auto field : vocab) {
    uint64_t id = 0;
    if (field.value.get(id) != simdjson::SUCCESS || id > max_token_id)
      r.fail("model.vocab",
             "the id of " + in_quotes(field.key) + " is not a token id (0.." + std::to_string(max_token_id) + ")");
    model->add_token(field.key, static_cast<int32_t>(id));
  }

  const dom::array merges = r.array_of(r.member(o, "merges", where), "model.merges");
  uint32_t rank = 0;
  for (dom::element m : merges) {
    std::string_view left;
    std::string_view right;
    std::string_view line;
    if (m.get(line) == simdjson::SUCCESS) {
      // Legacy form "a b": HF requires exactly one space.
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        r.fail(at("model.merges", rank), "merge " + in_quotes(line) + " is not two tokens separated by one space");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      dom::array pair;
      if (m.get(pair) != simdjson::SUCCESS || pair.size() != 2 || pair.at(0).get(left) != simdjson::SUCCESS ||
          pair.at(1).get(right) != simdjson::SUCCESS)
        r.fail(at("model.merges", rank), "a merge must be a string \"a b\" or an array of two strings");
    }
    if (auto missing = model->add_merge(left, right, rank))
      r.fail(at("model.merges", rank), "merge token " + in_quotes(*missing) + " is not in the vocabulary");
    ++rank;
  }
  if (auto problem = model->finish_loading())
    r.fail(where, *problem);
  return model;
}

added_token read_added_token(const reader& r, dom::element e, std::string_view where) {
  const dom::object o = r.object_of(e, where);
  r.allow_only(o, where, "added token", {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
  added_token t;
  uint64_t id = 0;
  if (r.member(o, "id", where).get(id) != simdjson::SUCCESS || id > max_token_id)
    r.fail(at(where, "id"), "expected a token id (0.." + std::to_string(max_token_id) + ")");
  t.id = static_cast<int32_t>(id);
  t.content = std::string{r.string_member(o, "content", where)};
  if (t.content.empty())
    r.fail(at(where, "content"), "an added token cannot be empty");
  t.single_word = r.bool_member(o, "single_word", where, false);
  t.lstrip = r.bool_member(o, "lstrip", where, false);
  t.rstrip = r.bool_member(o, "rstrip", where, false);
  t.special = r.bool_member(o, "special", where, false);
  // HF's AddedToken default: special tokens are not normalized, others are.
  t.normalized = r.bool_member(o, "normalized", where, !t.special);
  return t;
}

// The "special_tokens" map of TemplateProcessing: name -> ids.
std::vector<std::vector<template_piece>> read_post_processor(const reader& r, dom::element e, std::string_view where) {
  std::vector<std::vector<template_piece>> templates;
  if (e.is_null())
    return templates;
  const dom::object o = r.object_of(e, where);
  const std::string_view type = r.type_of(o, where, "post_processor");
  if (type == "ByteLevel") {
    // Only trims offsets; ids are unchanged.
    r.allow_only(o, where, "ByteLevel post_processor", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return templates;
  }
  if (type == "Sequence") {
    r.allow_only(o, where, "Sequence post_processor", {"type", "processors"});
    size_t i = 0;
    for (dom::element p : r.array_of(r.member(o, "processors", where), at(where, "processors"))) {
      auto inner = read_post_processor(r, p, at(at(where, "processors"), i++));
      for (auto& t : inner)
        templates.push_back(std::move(t));
    }
    return templates;
  }
  if (type != "TemplateProcessing")
    r.fail(where, "unsupported post_processor type " + in_quotes(type));
  r.allow_only(o, where, "TemplateProcessing post_processor", {"type", "single", "pair", "special_tokens"});
  std::unordered_map<std::string, std::vector<int32_t>> specials;
  const std::string specials_where = at(where, "special_tokens");
  for (auto field : r.object_of(r.member(o, "special_tokens", where), specials_where)) {
    const std::string entry_where = at(specials_where, field.key);
    const dom::object entry = r.object_of(field.value, entry_where);
    std::vector<int32_t> ids;
    for (dom::element id : r.array_of(r.member(entry, "ids", entry_where), at(entry_where, "ids"))) {
      uint64_t v = 0;
      if (id.get(v) != simdjson::SUCCESS || v > max_token_id)
        r.fail(at(entry_where, "ids"), "expected token ids");
      ids.push_back(static_cast<int32_t>(v));
    }
    specials[std::string{field.key}] = std::move(ids);
  }
  // Pair templates only matter for encoding sentence pairs, which this tokenizer does not offer; they are
  // still checked so that a broken file is reported.
  std::vector<template_piece> single;
  for (std::string_view key : {"single", "pair"}) {
    const std::string list_where = at(where, key);
    size_t i = 0;
    for (dom::element item : r.array_of(r.member(o, key, where), list_where)) {
      const std::string item_where = at(list_where, i++);
      const dom::object piece = r.object_of(item, item_where);
      template_piece tp;
      dom::element inner;
      if (piece.at_key("Sequence").get(inner) == simdjson::SUCCESS) {
        const std::string_view id = r.string_member(r.object_of(inner, item_where), "id", item_where);
        if (id != "A" && id != "B")
          r.fail(item_where, "unknown sequence " + in_quotes(id) + " (expected \"A\" or \"B\")");
        if (key == "single" && id != "A")
          r.fail(item_where, "the single template can only use sequence \"A\"");
        tp.is_sequence = true;
      } else if (piece.at_key("SpecialToken").get(inner) == simdjson::SUCCESS) {
        const std::string_view id = r.string_member(r.object_of(inner, item_where), "id", item_where);
        auto it = specials.find(std::string{id});
        if (it == specials.end())
          r.fail(item_where, "special token " + in_quotes(id) + " is missing from special_tokens");
        tp.ids = it->second;
      } else {
        r.fail(item_where, "expected a \"Sequence\" or \"SpecialToken\" template piece");
      }
      if (key == "single")
        single.push_back(std::move(tp));
    }
  }
  templates.push_back(std::move(single));
  return templates;
}

// What tokenizer_config.json contributes.
struct config_values {
  bool present = false;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string tokenizer_class;
  std::optional<std::string> chat_template;
  bool split_special_tokens = false;
  std::vector<added_token> added_tokens_decoder;
  std::optional<double> model_max_length;
};

// On-Demand helpers: every accessor reports the key it was reading.
template <class T>
T need(const reader& r, simdjson::simdjson_result<T> result, std::string_view where, std::string_view what) {
  T value;
  if (auto error = std::move(result).get(value); error != simdjson::SUCCESS)
    r.fail(where, "expected " + std::string{what} + " (" + simdjson::error_message(error) + ")");
  return value;
}

bool is_null(const reader& r, ondemand::value& v, std::string_view where) {
  const auto type = need(r, v.type(), where, "a JSON value");
  return type == ondemand::json_type::null;
}

// A special token as transformers writes it: "<s>", null, or {"content": "<s>", ...} (AddedToken).
std::optional<std::string> read_token_name(const reader& r, ondemand::value v, std::string_view where) {
  if (is_null(r, v, where))
    return std::nullopt;
  if (need(r, v.type(), where, "a JSON value") == ondemand::json_type::object) {
    ondemand::object o = need(r, v.get_object(), where, "an object");
    ondemand::value content = need(r, o.find_field_unordered("content"), where, "a \"content\" field");
    return std::string{need(r, content.get_string(), at(where, "content"), "a string")};
  }
  return std::string{need(r, v.get_string(), where, "a string, an object with \"content\", or null")};
}

config_values read_config(const std::filesystem::path& path) {
  config_values c;
  const reader r{path.string()};
  simdjson::padded_string json;
  if (auto error = simdjson::padded_string::load(path.string()).get(json); error != simdjson::SUCCESS)
    r.fail("", std::string{"cannot read file: "} + simdjson::error_message(error));
  c.present = true;
  ondemand::parser parser;
  ondemand::document doc = need(r, parser.iterate(json), "", "a JSON document");
  ondemand::object root = need(r, doc.get_object(), "", "a JSON object at the top level");
  for (auto field_result : root) {
    ondemand::field field = need(r, std::move(field_result), "", "an object member");
    const std::string key{need(r, field.unescaped_key(), "", "a member name")};
    ondemand::value v = field.value();
    if (key == "bos_token") {
      c.bos_token = read_token_name(r, v, key);
    } else if (key == "eos_token") {
      c.eos_token = read_token_name(r, v, key);
    } else if (key == "add_bos_token" || key == "add_eos_token") {
      if (is_null(r, v, key))
        continue;
      (key == "add_bos_token" ? c.add_bos_token : c.add_eos_token) = need(r, v.get_bool(), key, "true or false");
    } else if (key == "tokenizer_class") {
      if (!is_null(r, v, key))
        c.tokenizer_class = std::string{need(r, v.get_string(), key, "a string")};
    } else if (key == "split_special_tokens") {
      c.split_special_tokens = need(r, v.get_bool(), key, "true or false");
    } else if (key == "model_max_length") {
      if (!is_null(r, v, key))
        c.model_max_length = need(r, v.get_double(), key, "a number");
    } else if (key == "chat_template") {
      const auto type = need(r, v.type(), key, "a JSON value");
      if (type == ondemand::json_type::null)
        continue;
      if (type == ondemand::json_type::string) {
        c.chat_template = std::string{need(r, v.get_string(), key, "a string")};
        continue;
      }
      // A list of named templates: {"name": ..., "template": ...}; the engine uses the default one.
      ondemand::array list = need(r, v.get_array(), key, "a string or a list of named templates");
      size_t i = 0;
      for (auto item_result : list) {
        const std::string item_where = at(key, i++);
        ondemand::object item = need(r, need(r, std::move(item_result), item_where, "a value").get_object(), item_where,
                                     "an object with \"name\" and \"template\"");
        std::string name;
        std::string text;
        for (auto member_result : item) {
          ondemand::field member = need(r, std::move(member_result), item_where, "an object member");
          const std::string_view member_key = need(r, member.unescaped_key(), item_where, "a member name");
          if (member_key == "name")
            name = std::string{need(r, member.value().get_string(), at(item_where, "name"), "a string")};
          else if (member_key == "template")
            text = std::string{need(r, member.value().get_string(), at(item_where, "template"), "a string")};
        }
        if (name == "default")
          c.chat_template = std::move(text);
      }
    } else if (key == "added_tokens_decoder") {
      ondemand::object entries = need(r, v.get_object(), key, "an object of id -> token");
      for (auto entry_result : entries) {
        ondemand::field entry = need(r, std::move(entry_result), key, "an object member");
        const std::string id_text{need(r, entry.unescaped_key(), key, "a member name")};
        const std::string entry_where = at(key, id_text);
        added_token t;
        try {
          size_t used = 0;
          const long id = std::stol(id_text, &used);
          if (used != id_text.size() || id < 0 || static_cast<uint64_t>(id) > max_token_id)
            throw std::out_of_range("id");
          t.id = static_cast<int32_t>(id);
        } catch (const std::exception&) {
          r.fail(entry_where, in_quotes(id_text) + " is not a token id");
        }
        bool normalized_given = false;
        ondemand::object o = need(r, entry.value().get_object(), entry_where, "an object");
        for (auto member_result : o) {
          ondemand::field member = need(r, std::move(member_result), entry_where, "an object member");
          const std::string member_key{need(r, member.unescaped_key(), entry_where, "a member name")};
          ondemand::value mv = member.value();
          const std::string member_where = at(entry_where, member_key);
          if (member_key == "content") {
            t.content = std::string{need(r, mv.get_string(), member_where, "a string")};
          } else if (member_key == "single_word" || member_key == "lstrip" || member_key == "rstrip" ||
                     member_key == "normalized" || member_key == "special") {
            const bool b = need(r, mv.get_bool(), member_where, "true or false");
            if (member_key == "single_word")
              t.single_word = b;
            else if (member_key == "lstrip")
              t.lstrip = b;
            else if (member_key == "rstrip")
              t.rstrip = b;
            else if (member_key == "special")
              t.special = b;
            else {
              t.normalized = b;
              normalized_given = true;
            }
          }
        }
        if (!normalized_given)
          t.normalized = !t.special;
        if (t.content.empty())
          r.fail(entry_where, "missing or empty \"content\"");
        c.added_tokens_decoder.push_back(std::move(t));
      }
    }
    // Every other key (padding side, clean_up_tokenization_spaces, ...) is a transformers Python-side setting
    // with no effect on the ids or text this tokenizer produces.
  }
  return c;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw tokenizer_error(path.string() + ": cannot read file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_llama_like(std::string_view tokenizer_class) {
  for (std::string_view name : {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"}) {
    if (tokenizer_class == name || tokenizer_class == std::string{name} + "Fast")
      return true;
  }
  return false;
}

std::shared_ptr<tokenizer_impl> load(const std::filesystem::path& json_path, const std::filesystem::path& config_path,
                                     const std::filesystem::path& template_path) {
  const reader r{json_path.string()};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(json_path, ec))
    r.fail("", "file not found");
  dom::parser parser;
  dom::element root_element;
  if (auto error = parser.load(json_path.string()).get(root_element); error != simdjson::SUCCESS)
    r.fail("", std::string{"not valid JSON: "} + simdjson::error_message(error));
  const dom::object root = r.object_of(root_element, "");
  // truncation / padding configure batch encoding; transformers turns both off for plain encode calls (it
  // applies its own max_length/padding arguments), so they have no effect on what encode() returns here.
  r.allow_only(root, "", "tokenizer.json",
               {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                "decoder", "model"});

  config_values config;
  if (!config_path.empty() && std::filesystem::is_regular_file(config_path, ec))
    config = read_config(config_path);

  auto impl = std::make_shared<tokenizer_impl>();
  impl->model = read_model(r, r.member(root, "model", ""));
  dom::element e;
  impl->norm = root.at_key("normalizer").get(e) == simdjson::SUCCESS ? read_normalizer(r, e, "normalizer") : nullptr;
  impl->pre =
      root.at_key("pre_tokenizer").get(e) == simdjson::SUCCESS ? read_pre_tokenizer(r, e, "pre_tokenizer") : nullptr;
  decoder_traits traits;
  impl->dec = root.at_key("decoder").get(e) == simdjson::SUCCESS ? read_decoder(r, e, "decoder", traits) : nullptr;
  if (root.at_key("post_processor").get(e) == simdjson::SUCCESS)
    impl->templates = read_post_processor(r, e, "post_processor");

  std::vector<added_token> added;
  if (r.optional_member(root, "added_tokens", e)) {
    size_t i = 0;
    for (dom::element t : r.array_of(e, "added_tokens"))
      added.push_back(read_added_token(r, t, at("added_tokens", i++)));
  }
  // transformers adds tokens listed only in tokenizer_config.json; a conflicting id is a broken pair of files.
  const reader cr{config_path.string()};
  for (added_token& t : config.added_tokens_decoder) {
    auto same_id = std::find_if(added.begin(), added.end(), [&](const added_token& a) { return a.id == t.id; });
    if (same_id != added.end()) {
      if (same_id->content != t.content)
        cr.fail(at("added_tokens_decoder", std::to_string(t.id)), "token " + in_quotes(t.content) + " conflicts with " +
                                                                      in_quotes(same_id->content) +
                                                                      " that tokenizer.json has for the same id");
      continue;
    }
    const std::string* model_token = impl->model->id_to_token(t.id);
    if (model_token != nullptr && *model_token != t.content)
      cr.fail(at("added_tokens_decoder", std::to_string(t.id)),
              "token " + in_quotes(t.content) + " conflicts with vocabulary entry " + in_quotes(*model_token));
    added.push_back(std::move(t));
  }
  impl->added.build(std::move(added), impl->norm.get(), config.split_special_tokens);

  int32_t limit = impl->model->id_limit();
  for (const added_token& t : impl->added.tokens())
    limit = std::max(limit, t.id + 1);
  impl->id_strings.assign(static_cast<size_t>(limit), nullptr);
  impl->special.assign(static_cast<size_t>(limit), 0);
  impl->byte_fallback.assign(static_cast<size_t>(limit), 0);
  impl->added_token.assign(static_cast<size_t>(limit), 0);
  for (int32_t id = 0; id < impl->model->id_limit(); ++id)
    impl->id_strings[static_cast<size_t>(id)] = impl->model->id_to_token(id);
  for (const added_token& t : impl->added.tokens()) {
    impl->id_strings[static_cast<size_t>(t.id)] = &t.content;
    impl->added_token[static_cast<size_t>(t.id)] = 1;
  }
  // HF decides "special" by content, so a vocabulary entry spelled like a special added token is skipped too.
  for (const added_token& t : impl->added.tokens()) {
    if (!t.special)
      continue;
    impl->special[static_cast<size_t>(t.id)] = 1;
    const int32_t model_id = impl->model->token_to_id(t.content);
    if (model_id >= 0 && impl->id_strings[static_cast<size_t>(model_id)] != nullptr &&
        *impl->id_strings[static_cast<size_t>(model_id)] == t.content)
      impl->special[static_cast<size_t>(model_id)] = 1;
  }
  if (traits.byte_fallback) {
    for (size_t id = 0; id < impl->id_strings.size(); ++id) {
      if (impl->id_strings[id] != nullptr && byte_fallback_decoder::byte_of(*impl->id_strings[id]) >= 0)
        impl->byte_fallback[id] = 1;
    }
  }

  for (const added_token& t : impl->added.tokens()) {
    if (impl->added_ids.find(t.content) < 0)
      impl->added_ids.insert_or_assign(t.content, t.id);
  }
  auto lookup = [&](const std::string& token) -> std::optional<int32_t> {
    int32_t id = impl->added_ids.find(token);
    if (id < 0)
      id = impl->model->token_to_id(token);
    return id >= 0 ? std::optional<int32_t>{id} : std::nullopt;
  };
  impl->bos_token = config.bos_token.value_or("");
  impl->eos_token = config.eos_token.value_or("");
  if (config.bos_token)
    impl->bos_id = lookup(*config.bos_token);
  if (config.eos_token)
    impl->eos_id = lookup(*config.eos_token);

  // LlamaTokenizerFast.update_post_processor: add_bos_token / add_eos_token rebuild the template. Other classes
  // follow the same rule when the config states either flag (transformers 5 does this for every fast
  // tokenizer; a missing BOS/EOS then just turns the flag off).
  const bool llama_like = is_llama_like(config.tokenizer_class);
  if (config.present && (llama_like || config.add_bos_token || config.add_eos_token)) {
    bool add_bos = config.add_bos_token.value_or(llama_like);
    bool add_eos = config.add_eos_token.value_or(false);
    std::vector<template_piece> single;
    auto special_piece = [&](const std::optional<std::string>& name, const std::optional<int32_t>& id,
                             std::string_view flag) {
      if (!name) {
        if (llama_like)
          cr.fail("", std::string{flag} + " is true but the token it adds is not set");
        return false;
      }
      if (!id)
        cr.fail("", std::string{flag} + " is true but " + in_quotes(*name) + " is not in the vocabulary");
      single.push_back({false, {*id}});
      return true;
    };
    if (add_bos)
      add_bos = special_piece(config.bos_token, impl->bos_id, "add_bos_token");
    single.push_back({true, {}});
    if (add_eos)
      add_eos = special_piece(config.eos_token, impl->eos_id, "add_eos_token");
    impl->templates.assign(1, std::move(single));
  }

  impl->chat_template = config.chat_template;
  if (!impl->chat_template && !template_path.empty() && std::filesystem::is_regular_file(template_path, ec))
    impl->chat_template = read_text_file(template_path);
  if (config.model_max_length && *config.model_max_length > 0 && *config.model_max_length < 1e15)
    impl->model_max_length = static_cast<int64_t>(*config.model_max_length);
  return impl;
}

}  // namespace

tokenizer tokenizer::from_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw tokenizer_error(dir.string() + ": tokenizer directory not found");
  const auto json = dir / "tokenizer.json";
  if (!std::filesystem::is_regular_file(json, ec)) {
    std::string hint;
    if (std::filesystem::exists(dir / "tokenizer.model", ec))
      hint = " (there is a tokenizer.model; only the Hugging Face tokenizer.json format is supported)";
    throw tokenizer_error(json.string() + ": file not found" + hint);
  }
  return tokenizer{load(json, dir / "tokenizer_config.json", dir / "chat_template.jinja")};
}

tokenizer tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::filesystem::path& tokenizer_config) {
  return tokenizer{load(tokenizer_json, tokenizer_config, {})};
}

}  // namespace actorllm::text
