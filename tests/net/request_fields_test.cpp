// The field walk: every request field of OpenAI's schemas (../shared/openai) and of vLLM's extra parameters is
// either implemented (a request with it parses to something different from one without it), accepted only at
// the values it can honour, informational, or refused with a 400 whose `param` names it. None is dropped.
#include "net/openai/request_fields.hpp"
#include "net/openai/requests.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "schema_check.hpp"

using namespace actorllm::net::openai;

namespace {

// vLLM's extra request parameters (vllm/entrypoints/openai/protocol.py, CompletionRequest and
// ChatCompletionRequest), beyond OpenAI's.
const std::vector<std::string> vllm_completion_extras{"use_beam_search",
                                                      "top_k",
                                                      "min_p",
                                                      "repetition_penalty",
                                                      "length_penalty",
                                                      "stop_token_ids",
                                                      "include_stop_str_in_output",
                                                      "ignore_eos",
                                                      "min_tokens",
                                                      "skip_special_tokens",
                                                      "spaces_between_special_tokens",
                                                      "truncate_prompt_tokens",
                                                      "allowed_token_ids",
                                                      "bad_words",
                                                      "prompt_logprobs",
                                                      "logprob_token_ids",
                                                      "add_special_tokens",
                                                      "response_format",
                                                      "structured_outputs",
                                                      "guided_json",
                                                      "guided_regex",
                                                      "guided_choice",
                                                      "guided_grammar",
                                                      "guided_decoding_backend",
                                                      "guided_whitespace_pattern",
                                                      "structural_tag",
                                                      "priority",
                                                      "request_id",
                                                      "logits_processors",
                                                      "return_tokens_as_token_ids",
                                                      "return_token_ids",
                                                      "cache_salt",
                                                      "kv_transfer_params",
                                                      "vllm_xargs",
                                                      "prompt_embeds"};
const std::vector<std::string> vllm_chat_extras{"best_of",
                                                "use_beam_search",
                                                "top_k",
                                                "min_p",
                                                "repetition_penalty",
                                                "length_penalty",
                                                "stop_token_ids",
                                                "include_stop_str_in_output",
                                                "ignore_eos",
                                                "min_tokens",
                                                "skip_special_tokens",
                                                "spaces_between_special_tokens",
                                                "truncate_prompt_tokens",
                                                "prompt_logprobs",
                                                "logprob_token_ids",
                                                "allowed_token_ids",
                                                "bad_words",
                                                "echo",
                                                "add_generation_prompt",
                                                "continue_final_message",
                                                "add_special_tokens",
                                                "documents",
                                                "chat_template",
                                                "chat_template_kwargs",
                                                "mm_processor_kwargs",
                                                "structured_outputs",
                                                "guided_json",
                                                "guided_regex",
                                                "guided_choice",
                                                "guided_grammar",
                                                "structural_tag",
                                                "guided_decoding_backend",
                                                "guided_whitespace_pattern",
                                                "priority",
                                                "request_id",
                                                "logits_processors",
                                                "return_tokens_as_token_ids",
                                                "return_token_ids",
                                                "cache_salt",
                                                "kv_transfer_params",
                                                "vllm_xargs",
                                                "include_reasoning"};

// A value to send for a field: `value` is the field's JSON; `with` other fields it needs (also in the baseline);
// `refused_value` for a restricted field, a value it must refuse.
struct sample {
  sample(std::string v, std::string w = {}, std::string r = {})
      : value(std::move(v)), with(std::move(w)), refused_value(std::move(r)) {}
  std::string value;
  std::string with;
  std::string refused_value;
};

// Samples by field name; "chat:NAME" / "completions:NAME" where the endpoints differ.
const std::map<std::string, sample>& samples() {
  static const std::map<std::string, sample> m{
      {"model", {R"("other")"}},
      {"prompt", {R"("a different prompt")"}},
      {"messages", {R"([{"role":"user","content":"other"}])"}},
      {"max_tokens", {"7"}},
      {"max_completion_tokens", {"9"}},
      {"temperature", {"0.3"}},
      {"top_p", {"0.5"}},
      {"n", {"2"}},
      {"stop", {R"(["x"])"}},
      {"seed", {"5"}},
      {"presence_penalty", {"0.5"}},
      {"frequency_penalty", {"0.5"}},
      {"completions:logprobs", {"2"}},
      {"chat:logprobs", {"true"}},
      {"top_logprobs", {"2", R"("logprobs":true)"}},
      {"completions:echo", {"true"}},
      {"chat:echo", {"true"}},
      {"stream", {"true"}},
      {"stream_options", {R"({"include_usage":true})", R"("stream":true)"}},
      {"user", {R"("u1")"}},
      {"metadata", {R"({"k":"v"})"}},
      {"safety_identifier", {R"("id")"}},
      {"prompt_cache_key", {R"("k")"}},
      {"parallel_tool_calls", {"false"}},
      {"include_reasoning", {"false"}},
      {"best_of", {"1", "", "3"}},
      {"store", {"false", "", "true"}},
      {"service_tier", {R"("auto")", "", R"("flex")"}},
      {"modalities", {R"(["text"])", "", R"(["text","audio"])"}},
      {"response_format", {R"({"type":"json_object"})"}},
      {"tool_choice", {R"("none")"}},
      {"use_beam_search", {"false", "", "true"}},
      {"length_penalty", {"1.0", "", "0.5"}},
      {"spaces_between_special_tokens", {"true", "", "false"}},
      {"reasoning_effort", {R"("low")"}},
      {"top_k", {"5"}},
      {"min_p", {"0.1"}},
      {"repetition_penalty", {"1.2"}},
      {"stop_token_ids", {"[3]"}},
      {"include_stop_str_in_output", {"true"}},
      {"ignore_eos", {"true"}},
      {"min_tokens", {"1"}},
      {"skip_special_tokens", {"false"}},
      {"priority", {"2"}},
      {"cache_salt", {R"("salt")"}},
      {"add_generation_prompt", {"false"}},
      {"continue_final_message", {"true"}},
      {"add_special_tokens", {"true"}},
      {"chat_template", {R"("{{ messages[0].content }}")"}},
      {"chat_template_kwargs", {R"({"enable_thinking":false})"}},
      {"documents", {R"([{"title":"t","text":"x"}])"}},
      {"request_id", {R"("abc")"}},
      {"truncate_prompt_tokens", {"3"}},
      {"return_tokens_as_token_ids", {"true"}},
      {"logit_bias", {R"({"1":5})"}},
      {"suffix", {R"("tail")"}},
      {"audio", {R"({"voice":"alloy","format":"mp3"})"}},
      {"function_call", {R"("auto")"}},
      {"functions", {R"([{"name":"f"}])"}},
      {"tools", {R"([{"type":"function","function":{"name":"f"}}])"}},
      {"moderation", {"{}"}},
      {"prediction", {R"({"type":"content","content":"x"})"}},
      {"prompt_cache_options", {"{}"}},
      {"prompt_cache_retention", {R"("24h")"}},
      {"verbosity", {R"("low")"}},
      {"web_search_options", {"{}"}},
      {"allowed_token_ids", {"[1,2]"}},
      {"bad_words", {R"(["x"])"}},
      {"prompt_logprobs", {"1"}},
      {"completions:logprob_token_ids", {"[3,7]", R"("logprobs":0)"}},
      {"chat:logprob_token_ids", {"[3,7]", R"("logprobs":true)"}},
      {"return_token_ids", {"true"}},
      {"structured_outputs", {R"({"choice":["a","b"]})"}},
      {"guided_json", {R"({"type":"object"})"}},
      {"guided_regex", {R"("a+")"}},
      {"guided_choice", {R"(["a","b"])"}},
      {"guided_grammar", {R"("root ::= \"a\"")"}},
      {"guided_decoding_backend", {R"("xgrammar")"}},
      {"guided_whitespace_pattern", {R"(" ")"}},
      {"structural_tag", {R"("{}")"}},
      {"logits_processors", {"[]"}},
      {"kv_transfer_params", {"{}"}},
      {"vllm_xargs", {"{}"}},
      {"mm_processor_kwargs", {"{}"}},
      {"prompt_embeds", {R"("AAAA")"}},
  };
  return m;
}

const sample* find_sample(endpoint e, const std::string& field) {
  const auto& m = samples();
  if (auto it = m.find(std::string{endpoint_name(e)} + ":" + field); it != m.end())
    return &it->second;
  if (auto it = m.find(field); it != m.end())
    return &it->second;
  return nullptr;
}

// A body with `fields` (JSON members, comma separated) beside the endpoint's required field, unless `fields`
// gives that one itself.
std::string body(endpoint e, const std::string& field, const std::string& fields) {
  const std::string required = e == endpoint::chat ? "messages" : "prompt";
  std::string base = e == endpoint::chat ? R"("messages":[{"role":"user","content":"hello there"}])"
                                         : R"("prompt":"Once upon a time")";
  std::string out = "{";
  if (field != required)
    out += base;
  if (!fields.empty())
    out += (out.size() > 1 ? "," : "") + fields;
  return out + "}";
}

std::string member(const std::string& name, const std::string& value) { return "\"" + name + "\":" + value; }

struct parsed {
  bool ok = false;
  api_error error;
  std::optional<completion_request> completion;
  std::optional<chat_request> chat;
  bool same_as(const parsed& o) const { return completion == o.completion && chat == o.chat; }
};

parsed parse(endpoint e, const std::string& json) {
  parsed p;
  if (e == endpoint::chat) {
    auto r = parse_chat_request(json);
    p.ok = r.has_value();
    if (p.ok)
      p.chat = *r;
    else
      p.error = r.error();
  } else {
    auto r = parse_completion_request(json);
    p.ok = r.has_value();
    if (p.ok)
      p.completion = *r;
    else
      p.error = r.error();
  }
  return p;
}

struct walk_counts {
  int implemented = 0, restricted = 0, informational = 0, refused = 0;
};

// Checks one field of endpoint `e` against its rule; counts what it found.
void check_field(endpoint e, const std::string& field, walk_counts& counts) {
  CAPTURE(field);
  const std::string where{endpoint_name(e)};
  CAPTURE(where);
  const field_rule* rule = find_request_field(e, field);
  REQUIRE_MESSAGE(rule != nullptr, "no rule for a known request field: it would be dropped");
  const sample* s = find_sample(e, field);
  REQUIRE_MESSAGE(s != nullptr, "the walk has no sample value for this field");
  const std::string with = s->with;
  const std::string given =
      body(e, field, with.empty() ? member(field, s->value) : with + "," + member(field, s->value));
  const std::string baseline = body(e, "", with);  // the required field at its base value
  const parsed p = parse(e, given);
  switch (rule->support) {
    case field_support::refused:
      ++counts.refused;
      REQUIRE_FALSE_MESSAGE(p.ok, given);
      CHECK(p.error.status == 400);
      CHECK(p.error.param == field);
      CHECK(p.error.message.find(field) != std::string::npos);
      break;
    case field_support::implemented: {
      ++counts.implemented;
      REQUIRE_MESSAGE(p.ok, given << " -> " << p.error.message);
      const parsed base = parse(e, baseline);
      REQUIRE_MESSAGE(base.ok, baseline << " -> " << base.error.message);
      CHECK_MESSAGE(!p.same_as(base), "the field parses but changes nothing in the request: dropped");
      break;
    }
    case field_support::restricted: {
      ++counts.restricted;
      CHECK_MESSAGE(p.ok, given << " -> " << p.error.message);
      REQUIRE_FALSE(s->refused_value.empty());
      const std::string bad = body(e, field, member(field, s->refused_value));
      const parsed q = parse(e, bad);
      REQUIRE_FALSE_MESSAGE(q.ok, bad);
      CHECK(q.error.status == 400);
      CHECK(q.error.param.starts_with(field));
      break;
    }
    case field_support::informational:
      ++counts.informational;
      CHECK_MESSAGE(p.ok, given << " -> " << p.error.message);
      break;
  }
}

}  // namespace

TEST_CASE("field walk: every OpenAI and vLLM request field is implemented or refused by name") {
  actorllm::test::openai_schemas schemas;
  struct endpoint_fields {
    endpoint e;
    std::vector<std::string> openai;
    const std::vector<std::string>* vllm;
  };
  const endpoint_fields all[] = {
      {endpoint::completions, schemas.property_names("CreateCompletionRequest"), &vllm_completion_extras},
      {endpoint::chat, schemas.property_names("CreateChatCompletionRequest"), &vllm_chat_extras},
  };
  walk_counts total;
  int fields = 0;
  for (const auto& ef : all) {
    REQUIRE(ef.openai.size() >= 15);  // the schema was read (18 and 37 fields in the pinned cut)
    std::vector<std::string> names = ef.openai;
    for (const std::string& x : *ef.vllm)
      if (std::find(names.begin(), names.end(), x) == names.end())
        names.push_back(x);
    walk_counts c;
    for (const std::string& f : names)
      check_field(ef.e, f, c);
    fields += static_cast<int>(names.size());
    MESSAGE(endpoint_name(ef.e) << ": " << names.size() << " fields (" << ef.openai.size()
                                << " OpenAI): " << c.implemented << " implemented, " << c.restricted << " restricted, "
                                << c.informational << " informational, " << c.refused << " refused");
    total.implemented += c.implemented;
    total.refused += c.refused;
  }
  CHECK(fields > 100);
  CHECK(total.implemented > 0);

  // And the other way round: every row the table has names a field of the schema or of vLLM's extras.
  for (const field_rule& r : request_fields()) {
    CAPTURE(r.name);
    for (const auto& ef : all) {
      if ((r.endpoints & static_cast<uint8_t>(ef.e)) == 0)
        continue;
      const bool in_openai = std::find(ef.openai.begin(), ef.openai.end(), r.name) != ef.openai.end();
      const bool in_vllm = std::find(ef.vllm->begin(), ef.vllm->end(), r.name) != ef.vllm->end();
      CHECK_MESSAGE((in_openai || in_vllm), "a table row for a field " << endpoint_name(ef.e) << " does not have");
    }
  }
}

TEST_CASE("field walk: fields in no schema are ignored but reported") {
  auto r = parse_completion_request(R"({"prompt":"x","whatever":{"deep":[1]},"stream":true,
      "stream_options":{"include_usage":true,"novel":1}})");
  REQUIRE(r.has_value());
  CHECK(r->ignored_fields == std::vector<std::string>{"whatever", "stream_options.novel"});
}
