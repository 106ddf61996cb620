// The request-field table. Adding support for a field means moving its row to `implemented` and giving the parser a
// reader for it (requests.cpp fails with a 500 naming the field when a row says implemented and no reader takes it).
#include "net/openai/request_fields.hpp"

#include <array>

namespace actorllm::net::openai {

namespace {

constexpr uint8_t cmpl = static_cast<uint8_t>(endpoint::completions);
constexpr uint8_t chat = static_cast<uint8_t>(endpoint::chat);
constexpr uint8_t both = cmpl | chat;

using enum field_support;

// clang-format off
constexpr std::array rules{
    // OpenAI's fields.
    field_rule{"model", both, implemented, "the served model name; empty: the first one"},
    field_rule{"prompt", cmpl, implemented, "text, texts, token ids or lists of token ids"},
    field_rule{"messages", chat, implemented,
               "rendered with the chat template; any role is passed to it; /batch: a list of conversations"},
    field_rule{"max_tokens", both, implemented, "output tokens per sequence"},
    field_rule{"max_completion_tokens", chat, implemented, "wins over max_tokens"},
    field_rule{"temperature", both, implemented, "0: greedy"},
    field_rule{"top_p", both, implemented, "nucleus sampling"},
    field_rule{"n", both, implemented, "sequences per prompt"},
    field_rule{"stop", both, implemented, "stop strings"},
    field_rule{"seed", both, implemented, "a 64-bit signed integer"},
    field_rule{"presence_penalty", both, implemented, "[-2, 2]"},
    field_rule{"frequency_penalty", both, implemented, "[-2, 2]"},
    field_rule{"logprobs", both, implemented, "completions: top-k count; chat: a boolean"},
    field_rule{"top_logprobs", chat, implemented, "alternatives per token with logprobs"},
    field_rule{"echo", cmpl, implemented, "the prompt is prepended to the text"},
    field_rule{"stream", both, implemented, "server-sent events"},
    field_rule{"stream_options", both, implemented, "include_usage, continuous_usage_stats"},
    field_rule{"user", both, informational, "an end-user id for the caller's own records"},
    field_rule{"metadata", chat, informational, "tags for stored completions; nothing is stored"},
    field_rule{"safety_identifier", chat, informational, "an end-user id for abuse reports"},
    field_rule{"prompt_cache_key", chat, informational, "a routing hint; prefix caching finds shared prefixes by itself"},
    field_rule{"parallel_tool_calls", chat, implemented, "false: at most one tool call"},
    field_rule{"best_of", both, restricted, "only best_of equal to n (no candidates beyond the n returned)"},
    field_rule{"store", chat, restricted, "only false: completions are not stored"},
    field_rule{"service_tier", chat, restricted, "only \"auto\" or \"default\""},
    field_rule{"modalities", chat, restricted, "only [\"text\"]"},
    field_rule{"response_format", both, implemented, "text, json_object, json_schema (structured outputs)"},
    field_rule{"tool_choice", chat, implemented, "none, auto (with --enable-auto-tool-choice), required, a named function"},
    field_rule{"logit_bias", both, implemented, "token id -> bias in [-100, 100], added to the logits"},
    field_rule{"suffix", cmpl, refused, "no model served here does fill-in-the-middle (vLLM refuses it too)"},
    field_rule{"audio", chat, refused, "audio output is not supported"},
    field_rule{"function_call", chat, refused, "the deprecated functions API is not supported"},
    field_rule{"functions", chat, refused, "the deprecated functions API is not supported"},
    field_rule{"tools", chat, implemented, "functions passed to the chat template; calls parsed from the output"},
    field_rule{"moderation", chat, refused, "moderation is not supported"},
    field_rule{"prediction", chat, refused, "predicted outputs are not supported"},
    field_rule{"prompt_cache_options", chat, refused, "prompt cache breakpoints are not supported"},
    field_rule{"prompt_cache_retention", chat, refused, "prompt cache retention settings are not supported"},
    field_rule{"reasoning_effort", chat, implemented, "passed to the chat template as reasoning_effort"},
    field_rule{"verbosity", chat, refused, "verbosity is not supported"},
    field_rule{"web_search_options", chat, refused, "web search is not supported"},

    // vLLM's extra parameters.
    field_rule{"top_k", both, implemented, "keep the k most likely tokens", true},
    field_rule{"min_p", both, implemented, "drop tokens below min_p times the top probability", true},
    field_rule{"repetition_penalty", both, implemented, "> 0, on prompt and output tokens", true},
    field_rule{"stop_token_ids", both, implemented, "token ids that end a sequence", true},
    field_rule{"include_stop_str_in_output", both, implemented, "keep the matched stop string", true},
    field_rule{"ignore_eos", both, implemented, "generate through end-of-sequence tokens", true},
    field_rule{"min_tokens", both, implemented, "no eos / stop-token finish before this many tokens", true},
    field_rule{"skip_special_tokens", both, implemented, "leave special tokens out of the text", true},
    field_rule{"priority", both, implemented, "lower runs first under --scheduling-policy priority", true},
    field_rule{"cache_salt", both, implemented, "a non-empty string separating prefix-cache tenants", true},
    field_rule{"add_generation_prompt", chat, implemented, "end the rendered template with the assistant's turn", true},
    field_rule{"continue_final_message", chat, implemented, "the output continues the last message", true},
    field_rule{"add_special_tokens", both, implemented, "add the tokenizer's special tokens (bos) to the prompt", true},
    field_rule{"chat_template", chat, implemented, "a Jinja template for this request", true},
    field_rule{"chat_template_kwargs", chat, implemented, "further variables for the chat template", true},
    field_rule{"documents", chat, implemented, "passed to the chat template as documents", true},
    field_rule{"request_id", both, implemented, "the response id's suffix", true},
    field_rule{"truncate_prompt_tokens", both, implemented, "keep only the last k prompt tokens (-1: max_model_len)", true},
    field_rule{"return_tokens_as_token_ids", both, implemented, "logprob tokens written as token_id:N", true},
    field_rule{"use_beam_search", both, restricted, "only false: beam search is not supported", true},
    field_rule{"length_penalty", both, restricted, "only 1.0 (it applies to beam search, which is not supported)", true},
    field_rule{"spaces_between_special_tokens", both, restricted, "only true", true},
    field_rule{"include_reasoning", chat, implemented, "with --reasoning-parser: false leaves the reasoning out", true},
    field_rule{"echo", chat, implemented, "the reply starts with the last message's content", true},
    field_rule{"allowed_token_ids", both, implemented, "only these tokens can be sampled", true},
    field_rule{"bad_words", both, implemented, "words never generated", true},
    field_rule{"prompt_logprobs", both, implemented, "each prompt token's logprob and the top k (not with stream)", true},
    field_rule{"logprob_token_ids", both, implemented, "these tokens' logprobs at every output position, not the top k",
               true},
    field_rule{"return_token_ids", both, implemented, "choices carry token_ids and prompt_token_ids", true},
    field_rule{"structured_outputs", both, implemented, "json, regex, choice or json_object", true},
    field_rule{"guided_json", both, implemented, "the output is JSON valid against the schema", true},
    field_rule{"guided_regex", both, implemented, "the output matches the regex", true},
    field_rule{"guided_choice", both, implemented, "the output is one of the strings", true},
    field_rule{"guided_grammar", both, refused, "context-free grammars are not supported (use json, regex or choice)", true},
    field_rule{"guided_decoding_backend", both, informational, "one built-in structured-output engine", true},
    field_rule{"guided_whitespace_pattern", both, refused, "JSON is always written compact: no whitespace pattern", true},
    field_rule{"structural_tag", both, refused, "structural tags are not supported", true},
    field_rule{"logits_processors", both, refused, "custom logits processors are not supported", true},
    field_rule{"kv_transfer_params", both, refused, "disaggregated prefill (KV transfer) is not supported", true},
    field_rule{"vllm_xargs", both, refused, "vLLM plug-in arguments are not supported", true},
    field_rule{"mm_processor_kwargs", chat, refused, "multimodal inputs are not supported", true},
    field_rule{"prompt_embeds", cmpl, refused, "prompt embeddings are not supported", true},
};
// clang-format on

}  // namespace

std::span<const field_rule> request_fields() { return rules; }

const field_rule* find_request_field(endpoint e, std::string_view name) {
  const auto bit = static_cast<uint8_t>(e);
  for (const field_rule& r : rules)
    if ((r.endpoints & bit) != 0 && r.name == name)
      return &r;
  return nullptr;
}

std::string_view endpoint_name(endpoint e) { return e == endpoint::chat ? "chat" : "completions"; }

}  // namespace actorllm::net::openai
