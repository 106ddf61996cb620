// Request parsing: simdjson DOM, one pass over each object's fields, exceptions only inside (a field_error thrown at
// the first bad field), turned into an api_error at the boundary.
#include "net/openai/requests.hpp"

#include "net/openai/request_fields.hpp"
#include "text/structured/byte_dfa.hpp"
#include "text/structured/json_schema.hpp"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace actorllm::net::openai {

namespace {

namespace dom = simdjson::dom;

struct field_error {
  api_error error;
};

[[noreturn]] void fail(std::string param, std::string message) {
  throw field_error{api_error::bad_request(std::move(message), std::move(param))};
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string type_name(dom::element v) {
  switch (v.type()) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
      return "an integer";
    case dom::element_type::DOUBLE:
      return "a number";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "an unknown JSON value";
}

std::string_view read_string(dom::element v, const std::string& param) {
  std::string_view s;
  if (v.get(s))
    fail(param, param + " must be a string, got " + type_name(v));
  return s;
}

bool read_bool(dom::element v, const std::string& param) {
  bool b = false;
  if (v.get(b))
    fail(param, param + " must be a boolean, got " + type_name(v));
  return b;
}

double read_number(dom::element v, const std::string& param) {
  switch (v.type()) {
    case dom::element_type::INT64:
      return static_cast<double>(v.get_int64().value_unsafe());
    case dom::element_type::UINT64:
      return static_cast<double>(v.get_uint64().value_unsafe());
    case dom::element_type::DOUBLE:
      return v.get_double().value_unsafe();
    default:
      fail(param, param + " must be a number, got " + type_name(v));
  }
}

// An integer in [lo, hi]; integral doubles (2.0) count as integers, as pydantic's lax mode takes them.
int64_t read_integer(dom::element v, const std::string& param, int64_t lo = std::numeric_limits<int64_t>::min(),
                     int64_t hi = std::numeric_limits<int64_t>::max()) {
  int64_t x = 0;
  switch (v.type()) {
    case dom::element_type::INT64:
      x = v.get_int64().value_unsafe();
      break;
    case dom::element_type::UINT64:
      fail(param, param + " is out of range: " + std::to_string(v.get_uint64().value_unsafe()));
    case dom::element_type::DOUBLE: {
      double d = v.get_double().value_unsafe();
      if (d != std::floor(d))
        fail(param, param + " must be an integer, got " + format_number(d));
      if (!(d >= -9.2e18 && d <= 9.2e18))
        fail(param, param + " is out of range: " + format_number(d));
      x = static_cast<int64_t>(d);
      break;
    }
    default:
      fail(param, param + " must be an integer, got " + type_name(v));
  }
  if (x < lo || x > hi)
    fail(param,
         param + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

int32_t read_int32(dom::element v, const std::string& param) {
  return static_cast<int32_t>(
      read_integer(v, param, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

float read_float(dom::element v, const std::string& param) { return static_cast<float>(read_number(v, param)); }

dom::array read_array(dom::element v, const std::string& param) {
  dom::array a;
  if (v.get(a))
    fail(param, param + " must be an array, got " + type_name(v));
  return a;
}

std::vector<std::string> read_stop(dom::element v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.emplace_back(read_string(v, "stop"));
    return out;
  }
  if (!v.is_array())
    fail("stop", "stop must be a string or a list of strings, got " + type_name(v));
  for (dom::element s : read_array(v, "stop"))
    out.emplace_back(read_string(s, "stop"));
  return out;
}

std::vector<int32_t> read_token_ids(dom::element v, const std::string& param) {
  std::vector<int32_t> ids;
  for (dom::element id : read_array(v, param))
    ids.push_back(read_int32(id, param));
  return ids;
}

// Position of the first byte that breaks UTF-8 (overlongs, surrogates and code points over U+10FFFF included).
std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  std::size_t i = 0;
  while (i < s.size()) {
    unsigned char c = byte(i);
    std::size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size())
      return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80)
        return i;
      cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    static constexpr uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::nullopt;
}

// Parses `body` into a top-level object, or throws the 400/413 that says why not.
dom::object parse_object(dom::parser& parser, simdjson::padded_string& padded, std::string_view body,
                         const parse_limits& limits) {
  if (body.size() > limits.max_body_bytes)
    throw field_error{api_error::payload_too_large("Request body of " + std::to_string(body.size()) +
                                                   " bytes exceeds the limit of " +
                                                   std::to_string(limits.max_body_bytes) + " bytes")};
  padded = simdjson::padded_string(body);
  if (auto err = parser.allocate(std::max<std::size_t>(padded.size(), 64), limits.max_depth))
    throw field_error{
        api_error::internal(std::string{"JSON parser allocation failed: "} + simdjson::error_message(err))};
  dom::element root;
  if (auto err = parser.parse(padded).get(root)) {
    if (err == simdjson::DEPTH_ERROR)
      fail({}, "Invalid JSON: nested deeper than " + std::to_string(limits.max_depth) + " levels");
    if (err == simdjson::UTF8_ERROR) {
      // simdjson only says "invalid UTF-8"; find where, so the client can see which string is at fault.
      auto bad = first_invalid_utf8(body);
      fail({}, "Request body is not valid UTF-8" +
                   (bad ? " (invalid byte at offset " + std::to_string(*bad) + ")" : std::string{}));
    }
    if (err == simdjson::EMPTY)
      fail({}, "Request body is empty; expected a JSON object");
    fail({}, std::string{"Invalid JSON: "} + simdjson::error_message(err));
  }
  dom::object obj;
  if (root.get(obj))
    fail({}, "Request body must be a JSON object, got " + type_name(root));
  return obj;
}

// What the common fields leave for the checks after all fields are read (JSON objects are unordered).
struct common_state {
  bool has_stream_options = false;
  bool has_max_tokens = false;
  std::optional<int64_t> best_of;
  text::structured::structured_limits structured{};  // parse_limits::structured
};

std::string json_text(dom::element v) { return simdjson::minify(v); }

// A restricted field's value that asks for something missing: a 400 naming the field and what is accepted.
[[noreturn]] void refuse_value(std::string_view key, dom::element v, endpoint e) {
  const field_rule* rule = find_request_field(e, key);
  std::string param{key};
  fail(param, param + " " + json_text(v) + " is not supported: " +
                  std::string{rule != nullptr ? rule->note : std::string_view{"unsupported value"}});
}

// One structured-output constraint per request: its pattern and the field that set it.
void set_constraint(common_request& r, const std::string& param, std::string pattern) {
  if (!r.structured_param.empty())
    fail(param,
         param + ": only one structured output constraint per request (" + r.structured_param + " is given too)");
  r.params.structured_pattern = std::move(pattern);
  r.structured_param = param;
}

// A JSON schema (an object, or a string holding one) as a pattern; unsupported keywords are a 400 naming them.
std::string schema_pattern(dom::element schema, const std::string& param,
                           const text::structured::structured_limits& limits) {
  std::string text;
  if (schema.is_string())
    text = std::string{read_string(schema, param)};
  else if (schema.is_object() || schema.is_bool())
    text = json_text(schema);
  else
    fail(param, param + " must be a JSON schema (an object), got " + type_name(schema));
  try {
    return text::structured::json_schema_pattern(text, limits);
  } catch (const text::structured::schema_error& e) {
    fail(param, param + ": " + e.what());
  }
}

std::string choice_from(dom::element v, const std::string& param, const text::structured::structured_limits& limits) {
  std::vector<std::string> choices;
  for (dom::element c : read_array(v, param))
    choices.emplace_back(read_string(c, param));
  if (choices.empty())
    fail(param, param + " must not be empty");
  try {
    return text::structured::choice_pattern(choices, limits);
  } catch (const text::structured::schema_error& e) {
    fail(param, param + ": " + e.what());
  }
}

// A regex as given: its size and syntax checked here, its automaton compiled (under the same limits) by the server.
std::string regex_from(dom::element v, const std::string& param, const text::structured::structured_limits& limits) {
  std::string regex{read_string(v, param)};
  try {
    text::structured::check_regex(regex, limits);
  } catch (const text::structured::regex_error& e) {
    fail(param, param + ": " + e.what());
  }
  return regex;
}

// response_format: text is plain generation; json_object any JSON object; json_schema the schema's JSON.
void read_response_format(dom::element v, common_request& r, const text::structured::structured_limits& limits) {
  dom::object obj;
  if (v.get(obj))
    fail("response_format", "response_format must be an object, got " + type_name(v));
  dom::element type_v;
  if (obj["type"].get(type_v))
    fail("response_format.type", "response_format.type is required");
  std::string_view type = read_string(type_v, "response_format.type");
  if (type == "text")
    return;
  if (type == "json_object") {
    set_constraint(r, "response_format", text::structured::json_object_pattern());
    return;
  }
  if (type == "json_schema") {
    dom::object js;
    if (obj["json_schema"].get(js))
      fail("response_format.json_schema", "response_format.json_schema is required for type json_schema");
    dom::element schema;
    if (js["schema"].get(schema))
      fail("response_format.json_schema.schema", "response_format.json_schema.schema is required");
    dom::element strict;
    if (js["strict"].get(strict) == simdjson::SUCCESS && !strict.is_null())
      read_bool(strict, "response_format.json_schema.strict");  // the output always follows the schema
    set_constraint(r, "response_format.json_schema.schema",
                   schema_pattern(schema, "response_format.json_schema.schema", limits));
    return;
  }
  fail("response_format.type",
       "response_format.type must be one of text, json_object or json_schema, got '" + std::string{type} + "'");
}

// vLLM's structured_outputs: {json | regex | choice | json_object}; grammar and structural tags are refused.
void read_structured_outputs(dom::element v, common_request& r, const text::structured::structured_limits& limits) {
  dom::object obj;
  if (v.get(obj))
    fail("structured_outputs", "structured_outputs must be an object, got " + type_name(v));
  for (dom::key_value_pair f : obj) {
    const std::string param = "structured_outputs." + std::string{f.key};
    if (f.value.is_null())
      continue;
    if (f.key == "json") {
      set_constraint(r, param, schema_pattern(f.value, param, limits));
    } else if (f.key == "regex") {
      set_constraint(r, param, regex_from(f.value, param, limits));
    } else if (f.key == "choice") {
      set_constraint(r, param, choice_from(f.value, param, limits));
    } else if (f.key == "json_object") {
      if (read_bool(f.value, param))
        set_constraint(r, param, text::structured::json_object_pattern());
    } else if (f.key == "disable_any_whitespace" || f.key == "disable_additional_properties" ||
               f.key == "disable_fallback") {
      read_bool(f.value, param);  // JSON is always written compact, with no extra properties, by one engine
    } else if (f.key == "backend") {
      read_string(f.value, param);  // one built-in engine
    } else {
      fail(param, param + " is not supported by this server (supported: json, regex, choice, json_object)");
    }
  }
}

// Reads a field both endpoints share; false when `key` is not one.
bool read_common_field(std::string_view key, dom::element v, common_request& r, common_state& st, endpoint e) {
  sampling_params& p = r.params;
  const std::string param{key};
  if (key == "model") {
    r.model = std::string{read_string(v, param)};
  } else if (key == "max_tokens") {
    p.max_tokens = read_int32(v, param);
    st.has_max_tokens = true;
  } else if (key == "temperature") {
    p.temperature = read_float(v, param);
  } else if (key == "top_p") {
    p.top_p = read_float(v, param);
  } else if (key == "top_k") {
    p.top_k = read_int32(v, param);
  } else if (key == "min_p") {
    p.min_p = read_float(v, param);
  } else if (key == "n") {
    p.n = read_int32(v, param);
  } else if (key == "stop") {
    p.stop = read_stop(v);
  } else if (key == "stop_token_ids") {
    p.stop_token_ids = read_token_ids(v, param);
  } else if (key == "seed") {
    // Any 64-bit signed integer (vLLM's range); negative seeds map onto uint64 by two's complement.
    if (v.type() == dom::element_type::UINT64)
      fail(param, "seed must be a 64-bit signed integer (in [-9223372036854775808, 9223372036854775807]), got " +
                      std::to_string(v.get_uint64().value_unsafe()));
    p.seed = static_cast<uint64_t>(read_integer(v, param));
  } else if (key == "presence_penalty") {
    p.presence_penalty = read_float(v, param);
  } else if (key == "frequency_penalty") {
    p.frequency_penalty = read_float(v, param);
  } else if (key == "repetition_penalty") {
    p.repetition_penalty = read_float(v, param);
  } else if (key == "ignore_eos") {
    p.ignore_eos = read_bool(v, param);
  } else if (key == "skip_special_tokens") {
    p.skip_special_tokens = read_bool(v, param);
  } else if (key == "include_stop_str_in_output") {
    p.include_stop_str_in_output = read_bool(v, param);
  } else if (key == "min_tokens") {
    p.min_tokens = read_int32(v, param);
  } else if (key == "echo") {
    r.echo = read_bool(v, param);
  } else if (key == "stream") {
    r.stream = read_bool(v, param);
  } else if (key == "stream_options") {
    dom::object opts;
    if (v.get(opts))
      fail(param, "stream_options must be an object, got " + type_name(v));
    st.has_stream_options = true;
    for (dom::key_value_pair f : opts) {
      if (f.value.is_null())
        continue;
      if (f.key == "include_usage") {
        r.include_usage = read_bool(f.value, "stream_options.include_usage");
      } else if (f.key == "continuous_usage_stats") {
        r.continuous_usage_stats = read_bool(f.value, "stream_options.continuous_usage_stats");
      } else if (f.key == "include_obfuscation") {
        if (read_bool(f.value, "stream_options.include_obfuscation"))
          fail("stream_options.include_obfuscation",
               "stream_options.include_obfuscation true is not supported: chunks carry no obfuscation padding");
      } else {
        r.ignored_fields.push_back("stream_options." + std::string{f.key});
      }
    }
  } else if (key == "user") {
    r.user = std::string{read_string(v, param)};
  } else if (key == "priority") {
    r.priority = read_int32(v, param);
  } else if (key == "cache_salt") {
    std::string_view salt = read_string(v, param);
    if (salt.empty())
      fail(param, "cache_salt must be a non-empty string (leave it out for no salt)");
    r.cache_salt = std::string{salt};
  } else if (key == "best_of") {
    st.best_of = read_integer(v, param, 1, std::numeric_limits<int32_t>::max());
  } else if (key == "use_beam_search") {
    if (read_bool(v, param))
      refuse_value(key, v, e);
  } else if (key == "length_penalty") {
    if (read_number(v, param) != 1.0)
      refuse_value(key, v, e);
  } else if (key == "spaces_between_special_tokens") {
    if (!read_bool(v, param))
      refuse_value(key, v, e);
  } else if (key == "response_format") {
    read_response_format(v, r, st.structured);
  } else if (key == "structured_outputs") {
    read_structured_outputs(v, r, st.structured);
  } else if (key == "guided_json") {
    set_constraint(r, param, schema_pattern(v, param, st.structured));
  } else if (key == "guided_regex") {
    set_constraint(r, param, regex_from(v, param, st.structured));
  } else if (key == "guided_choice") {
    set_constraint(r, param, choice_from(v, param, st.structured));
  } else if (key == "guided_decoding_backend") {
    read_string(v, param);
  } else if (key == "add_special_tokens") {
    r.add_special_tokens = read_bool(v, param);
  } else if (key == "request_id") {
    std::string_view id = read_string(v, param);
    if (id.empty())
      fail(param, "request_id must be a non-empty string (leave it out for a generated id)");
    r.request_id = std::string{id};
  } else if (key == "truncate_prompt_tokens") {
    const int64_t k = read_integer(v, param, -1, std::numeric_limits<int32_t>::max());
    if (k == 0)
      fail(param, "truncate_prompt_tokens must be -1 (max_model_len) or at least 1, got 0");
    r.truncate_prompt_tokens = static_cast<int32_t>(k);
  } else if (key == "return_tokens_as_token_ids") {
    r.return_tokens_as_token_ids = read_bool(v, param);
  } else if (key == "return_token_ids") {
    r.return_token_ids = read_bool(v, param);
  } else if (key == "logit_bias") {
    dom::object biases;
    if (v.get(biases))
      fail(param, "logit_bias must be an object mapping token ids to biases, got " + type_name(v));
    for (dom::key_value_pair b : biases) {
      const std::string id_text{b.key};
      int64_t id = -1;
      std::size_t used = 0;
      try {
        id = std::stoll(id_text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != id_text.size() || id_text.empty() || id < 0 || id > std::numeric_limits<int32_t>::max())
        fail(param, "logit_bias keys must be token ids, got '" + id_text + "'");
      const double bias = read_number(b.value, "logit_bias");
      if (!(bias >= -100 && bias <= 100))
        fail(param, "logit_bias values must be in [-100, 100], got " + format_number(bias) + " for token " + id_text);
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
    }
  } else if (key == "allowed_token_ids") {
    for (dom::element id : read_array(v, param)) {
      const int64_t x = read_integer(id, param, 0, std::numeric_limits<int32_t>::max());
      p.allowed_token_ids.push_back(static_cast<int32_t>(x));
    }
    if (p.allowed_token_ids.empty())
      fail(param, "allowed_token_ids must not be empty (leave it out to allow every token)");
  } else if (key == "bad_words") {
    for (dom::element w : read_array(v, param)) {
      std::string_view word = read_string(w, param);
      if (word.empty())
        fail(param, "bad_words must not hold empty strings");
      p.bad_words.emplace_back(word);
    }
  } else {
    return false;
  }
  return true;
}

// Reads every field of `obj` through the request-field table: nulls are "not given", fields in no schema are
// recorded in r.ignored_fields, refused fields are a 400 naming them, and each other field must be taken by `read`
// (a 500 naming it otherwise: the table and the readers disagree).
template <class Read>
void read_fields(dom::object obj, endpoint e, common_request& r, Read read) {
  for (dom::key_value_pair f : obj) {
    if (f.value.is_null())
      continue;
    const field_rule* rule = find_request_field(e, f.key);
    if (rule == nullptr) {
      r.ignored_fields.emplace_back(f.key);
      continue;
    }
    const std::string param{f.key};
    if (rule->support == field_support::refused)
      fail(param, param + " is not supported by this server (" + std::string{endpoint_name(e)} +
                      "): " + std::string{rule->note});
    if (!read(f.key, f.value))
      throw field_error{api_error::internal("request field " + param +
                                            " is listed as supported but no reader takes it (a server bug)")};
  }
}

// Starts `p` from the server's defaults; fields the body gives overwrite them.
void apply_defaults(sampling_params& p, const sampling_defaults& d) {
  if (d.temperature)
    p.temperature = *d.temperature;
  if (d.top_p)
    p.top_p = *d.top_p;
  if (d.top_k)
    p.top_k = *d.top_k;
  if (d.min_p)
    p.min_p = *d.min_p;
  if (d.repetition_penalty)
    p.repetition_penalty = *d.repetition_penalty;
}

// The checks that need every field: stream_options without stream, then sampling_params' own ranges.
void finish_common(common_request& r, const common_state& st, std::string_view max_tokens_param,
                   std::string_view logprobs_param) {
  if (st.has_stream_options && !r.stream)
    fail("stream_options", "Stream options can only be defined when `stream=True`.");
  if (st.best_of && *st.best_of != r.params.n)
    fail("best_of", "best_of " + std::to_string(*st.best_of) + " is not supported: only best_of equal to n (" +
                        std::to_string(r.params.n) + "): no candidates beyond the n returned are generated");
  std::string problem = validate(r.params);
  if (problem.empty())
    return;
  // validate() starts each message with the field's name ("stop strings must ...", "min_tokens (3) must ...").
  std::string param = problem.substr(0, problem.find_first_of(" ("));
  if (param == "max_tokens")
    param = std::string{max_tokens_param};
  else if (param == "logprobs")
    param = std::string{logprobs_param};
  fail(std::move(param), std::move(problem));
}

// prompt: a string, a list of strings, a list of token ids, or a list of token id lists; never empty.
std::vector<actorllm::prompt> read_prompts(dom::element v) {
  const std::string shape =
      "prompt must be a string, a list of strings, a list of token ids or a list of token id lists";
  std::vector<actorllm::prompt> out;
  auto text = [&](dom::element e) {
    std::string_view s = read_string(e, "prompt");
    if (s.empty())
      fail("prompt", "prompt must not be empty");
    out.emplace_back(std::string{s});
  };
  auto ids = [&](dom::element e) {
    std::vector<int32_t> t;
    for (dom::element id : read_array(e, "prompt")) {
      if (!id.is_int64() && !id.is_uint64() && !id.is_double())
        fail("prompt", shape + ", got a list holding " + type_name(id));
      int64_t x = read_integer(id, "prompt");
      if (x < 0 || x > std::numeric_limits<int32_t>::max())
        fail("prompt", "prompt token ids must be in [0, 2147483647], got " + std::to_string(x));
      t.push_back(static_cast<int32_t>(x));
    }
    if (t.empty())
      fail("prompt", "prompt must not be empty");
    out.emplace_back(std::move(t));
  };
  if (v.is_string()) {
    text(v);
    return out;
  }
  if (!v.is_array())
    fail("prompt", shape + ", got " + type_name(v));
  dom::array a = read_array(v, "prompt");
  if (a.size() == 0)
    fail("prompt", "prompt must not be empty");
  dom::element first = a.at(0).value_unsafe();
  if (first.is_string()) {
    for (dom::element e : a) {
      if (!e.is_string())
        fail("prompt", shape + ", got a list mixing strings and " + type_name(e));
      text(e);
    }
  } else if (first.is_array()) {
    for (dom::element e : a) {
      if (!e.is_array())
        fail("prompt", shape + ", got a list mixing lists and " + type_name(e));
      ids(e);
    }
  } else {
    ids(v);
  }
  return out;
}

// content: a string, a list of parts of which only text parts are supported (joined by "\n" as vLLM does), or
// null for an assistant message.
std::string read_content(dom::element v, const std::string& param, std::string_view role,
                         std::vector<std::string>& parts) {
  if (v.is_string()) {
    parts.emplace_back(read_string(v, param));
    return parts.back();
  }
  if (v.is_null()) {
    if (role == "assistant")
      return {};
    fail(param, param + " must not be null for role '" + std::string{role} + "'");
  }
  if (!v.is_array())
    fail(param, param + " must be a string or a list of content parts, got " + type_name(v));
  std::string text;
  std::size_t i = 0;
  for (dom::element part : read_array(v, param)) {
    std::string part_param = param + "[" + std::to_string(i) + "]";
    dom::object obj;
    if (part.get(obj))
      fail(part_param, part_param + " must be an object, got " + type_name(part));
    dom::element type_v;
    if (obj["type"].get(type_v))
      fail(part_param + ".type", part_param + ".type is required");
    std::string_view type = read_string(type_v, part_param + ".type");
    if (type != "text")
      fail(part_param + ".type",
           "Only text content parts are supported; " + part_param + " has type '" + std::string{type} + "'");
    dom::element text_v;
    if (obj["text"].get(text_v))
      fail(part_param + ".text", part_param + ".text is required");
    if (i > 0)
      text += '\n';
    parts.emplace_back(read_string(text_v, part_param + ".text"));
    text += parts.back();
    ++i;
  }
  return text;
}

std::vector<chat_message> read_messages(dom::element v) {
  dom::array a = read_array(v, "messages");
  if (a.size() == 0)
    fail("messages", "messages must not be empty");
  std::vector<chat_message> out;
  std::size_t i = 0;
  for (dom::element m : a) {
    const std::string param = "messages[" + std::to_string(i++) + "]";
    dom::object obj;
    if (m.get(obj))
      fail(param, param + " must be an object, got " + type_name(m));
    chat_message msg;
    std::optional<dom::element> content;
    bool has_role = false;
    for (dom::key_value_pair f : obj) {
      if (f.key == "role") {
        msg.role = std::string{read_string(f.value, param + ".role")};
        has_role = true;
      } else if (f.key == "content") {
        content = f.value;
      } else if (f.value.is_null()) {
        continue;
      } else if (f.key == "name") {
        msg.name = std::string{read_string(f.value, param + ".name")};
      } else if (f.key == "tool_call_id") {
        msg.tool_call_id = std::string{read_string(f.value, param + ".tool_call_id")};
      } else if (f.key == "tool_calls") {
        const std::string p = param + ".tool_calls";
        for (dom::element call : read_array(f.value, p)) {
          dom::element fn;
          std::string_view name;
          if (call["function"].get(fn) || fn["name"].get(name))
            fail(p, p + " entries must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        }
        msg.tool_calls_json = json_text(f.value);
      } else if (f.key == "function_call" || f.key == "audio") {
        const std::string p = param + "." + std::string{f.key};
        fail(p, p + " is not supported by this server (the deprecated function_call API and audio are not)");
      }
    }
    if (!has_role)
      fail(param + ".role", param + ".role is required");
    // Any role goes to the template (vLLM passes custom roles on); only an empty one is refused.
    if (msg.role.empty())
      fail(param + ".role", param + ".role must not be empty");
    if (!content) {
      if (msg.role != "assistant")
        fail(param + ".content", param + ".content is required");
    } else {
      msg.content = read_content(*content, param + ".content", msg.role, msg.parts);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

template <class Request, class Fill>
result<Request> parse_with(std::string_view body, const parse_limits& limits, Fill fill) {
  try {
    dom::parser parser;
    simdjson::padded_string padded;
    dom::object obj = parse_object(parser, padded, body, limits);
    Request r;
    fill(obj, r);
    return r;
  } catch (field_error& e) {
    return std::move(e.error);
  } catch (const std::bad_alloc&) {
    return api_error::payload_too_large("Request body is too large to parse");
  }
}

}  // namespace

result<completion_request> parse_completion_request(std::string_view body, const parse_limits& limits,
                                                    const sampling_defaults& defaults) {
  return parse_with<completion_request>(body, limits, [&](dom::object obj, completion_request& r) {
    common_state st;
    st.structured = limits.structured;
    apply_defaults(r.params, defaults);
    bool has_prompt = false;
    read_fields(obj, endpoint::completions, r, [&](std::string_view key, dom::element v) {
      if (key == "prompt") {
        r.prompts = read_prompts(v);
        has_prompt = true;
      } else if (key == "logprobs") {
        r.params.logprobs = static_cast<int32_t>(read_integer(v, "logprobs", 0, limits.max_logprobs));
      } else {
        return read_common_field(key, v, r, st, endpoint::completions);
      }
      return true;
    });
    if (!has_prompt)
      fail("prompt", "prompt is required");
    if (r.echo && r.params.logprobs)
      fail("echo",
           "echo together with logprobs is not supported by this server (it needs prompt logprobs, which are "
           "not supported yet)");
    if (!st.has_max_tokens && defaults.max_tokens) {
      r.params.max_tokens = defaults.max_tokens;
      r.max_tokens_defaulted = true;
    }
    finish_common(r, st, "max_tokens", "logprobs");
  });
}

result<chat_request> parse_chat_request(std::string_view body, const parse_limits& limits,
                                        const sampling_defaults& defaults) {
  return parse_with<chat_request>(body, limits, [&](dom::object obj, chat_request& r) {
    common_state st;
    st.structured = limits.structured;
    apply_defaults(r.params, defaults);
    bool has_messages = false;
    std::optional<int32_t> max_completion_tokens;
    std::optional<int32_t> top_logprobs;
    std::optional<std::string> documents, reasoning_effort;
    std::vector<std::pair<std::string, std::string>> kwargs;
    bool add_generation_prompt_given = false;
    read_fields(obj, endpoint::chat, r, [&](std::string_view key, dom::element v) {
      const std::string param{key};
      if (key == "messages") {
        r.messages = read_messages(v);
        has_messages = true;
      } else if (key == "logprobs") {
        r.logprobs = read_bool(v, param);
      } else if (key == "top_logprobs") {
        top_logprobs = static_cast<int32_t>(read_integer(v, param, 0, limits.max_logprobs));
      } else if (key == "max_completion_tokens") {
        max_completion_tokens = read_int32(v, param);
      } else if (key == "add_generation_prompt") {
        r.add_generation_prompt = read_bool(v, param);
        add_generation_prompt_given = true;
      } else if (key == "continue_final_message") {
        r.continue_final_message = read_bool(v, param);
      } else if (key == "chat_template") {
        r.chat_template = std::string{read_string(v, param)};
      } else if (key == "chat_template_kwargs") {
        dom::object kw;
        if (v.get(kw))
          fail(param, "chat_template_kwargs must be an object, got " + type_name(v));
        for (dom::key_value_pair k : kw)
          kwargs.emplace_back(std::string{k.key}, json_text(k.value));
      } else if (key == "documents") {
        read_array(v, param);
        documents = json_text(v);
      } else if (key == "reasoning_effort") {
        read_string(v, param);
        reasoning_effort = json_text(v);
      } else if (key == "tool_choice") {
        if (v.is_string()) {
          std::string_view c = read_string(v, param);
          if (c == "none" || c == "auto" || c == "required") {
            r.tool_choice = std::string{c};
            return true;
          }
          fail(param, "tool_choice must be \"none\", \"auto\", \"required\" or a named function, got '" +
                          std::string{c} + "'");
        }
        dom::object named;
        std::string_view name;
        if (v.get(named) || named["function"]["name"].get(name))
          fail(param, "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                          json_text(v));
        r.tool_choice = "function";
        r.tool_choice_name = std::string{name};
      } else if (key == "tools") {
        std::size_t i = 0;
        for (dom::element t : read_array(v, param)) {
          const std::string tp = "tools[" + std::to_string(i++) + "]";
          std::string_view type;
          dom::object fn;
          if (t["type"].get(type) || type != "function")
            fail(tp + ".type", tp + ".type must be \"function\"");
          if (t["function"].get(fn))
            fail(tp + ".function", tp + ".function is required");
          tool_function f;
          std::string_view name;
          if (fn["name"].get(name) || name.empty())
            fail(tp + ".function.name", tp + ".function.name must be a non-empty string");
          f.name = std::string{name};
          dom::element params;
          if (fn["parameters"].get(params) == simdjson::SUCCESS && !params.is_null()) {
            if (!params.is_object())
              fail(tp + ".function.parameters", tp + ".function.parameters must be a JSON schema object");
            f.parameters_json = json_text(params);
          }
          r.tools.push_back(std::move(f));
        }
        r.tools_json = json_text(v);
      } else if (key == "store") {
        if (read_bool(v, param))
          refuse_value(key, v, endpoint::chat);
      } else if (key == "service_tier") {
        std::string_view tier = read_string(v, param);
        if (tier != "auto" && tier != "default")
          refuse_value(key, v, endpoint::chat);
      } else if (key == "modalities") {
        for (dom::element m : read_array(v, param))
          if (read_string(m, param) != "text")
            refuse_value(key, v, endpoint::chat);
      } else if (key == "metadata") {
        dom::object md;
        if (v.get(md))
          fail(param, "metadata must be an object of strings, got " + type_name(v));
        for (dom::key_value_pair m : md)
          read_string(m.value, "metadata." + std::string{m.key});
      } else if (key == "safety_identifier" || key == "prompt_cache_key") {
        read_string(v, param);
      } else if (key == "parallel_tool_calls") {
        r.parallel_tool_calls = read_bool(v, param);
      } else if (key == "include_reasoning") {
        read_bool(v, param);
      } else {
        return read_common_field(key, v, r, st, endpoint::chat);
      }
      return true;
    });
    if (!has_messages)
      fail("messages", "messages is required");
    if (r.continue_final_message) {
      if (add_generation_prompt_given && r.add_generation_prompt)
        fail("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
      r.add_generation_prompt = false;
    }
    // tool_choice "required" or a named function: the output is constrained to the calls' JSON, so it always parses.
    if ((r.tool_choice == "required" || r.tool_choice == "function") && r.tools.empty())
      fail("tool_choice", "tool_choice \"" + r.tool_choice + "\" needs tools");
    auto constrain_to = [&](const std::string& schema, const std::string& param) {
      try {
        set_constraint(r, "tool_choice", text::structured::json_schema_pattern(schema, limits.structured));
      } catch (const text::structured::schema_error& e) {
        fail(param, param + ": " + e.what());
      }
    };
    if (r.tool_choice == "required")
      constrain_to(required_tools_schema(r.tools, r.parallel_tool_calls ? 3 : 1), "tools");
    if (r.tool_choice == "function") {
      std::size_t i = 0;
      while (i < r.tools.size() && r.tools[i].name != r.tool_choice_name)
        ++i;
      if (i == r.tools.size())
        fail("tool_choice", "tool_choice names the function '" + r.tool_choice_name + "', which tools does not have");
      constrain_to(r.tools[i].parameters_json, "tools[" + std::to_string(i) + "].function.parameters");
    }
    if (documents)
      r.template_vars.emplace_back("documents", *documents);
    if (reasoning_effort)
      r.template_vars.emplace_back("reasoning_effort", *reasoning_effort);
    for (auto& kv : kwargs)
      r.template_vars.push_back(std::move(kv));
    if (top_logprobs && *top_logprobs > 0 && !r.logprobs)
      fail("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
    r.top_logprobs = top_logprobs.value_or(0);
    if (r.logprobs)
      r.params.logprobs = r.top_logprobs;
    // Chat has no default limit: unset generates up to the context length (vLLM).
    if (max_completion_tokens)
      r.params.max_tokens = max_completion_tokens;
    else if (!st.has_max_tokens) {
      r.params.max_tokens = defaults.max_tokens;
      r.max_tokens_defaulted = defaults.max_tokens.has_value();
    }
    finish_common(r, st, max_completion_tokens ? "max_completion_tokens" : "max_tokens", "top_logprobs");
  });
}

std::optional<api_error> check_context_length(int64_t prompt_tokens, std::optional<int32_t> max_tokens,
                                              int32_t max_model_len) {
  if (prompt_tokens >= max_model_len && (!max_tokens || prompt_tokens > max_model_len)) {
    return api_error::bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                                      " tokens. However, your request has " + std::to_string(prompt_tokens) +
                                      " input tokens. Please reduce the length of the input messages.",
                                  "input_tokens");
  }
  if (max_tokens && prompt_tokens + *max_tokens > max_model_len) {
    return api_error::bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                                      " tokens. However, you requested " + std::to_string(prompt_tokens + *max_tokens) +
                                      " tokens (" + std::to_string(prompt_tokens) + " in the messages, " +
                                      std::to_string(*max_tokens) +
                                      " in the completion). Please reduce the length of the messages or completion.",
                                  "max_tokens");
  }
  return std::nullopt;
}

result<std::string> resolve_model(std::string_view requested, std::span<const std::string> served_names) {
  if (requested.empty()) {
    if (served_names.empty())
      return api_error::unavailable("No model is being served");
    return served_names.front();
  }
  for (const std::string& name : served_names)
    if (name == requested)
      return name;
  return api_error::not_found("The model `" + std::string{requested} + "` does not exist.", "model");
}

}  // namespace actorllm::net::openai
