// A token's text as it reads inside generated text (for logprobs), which decode({id}) alone does not always give.
#pragma once

#include <cstdint>
#include <string>

namespace actorllm::text {

class tokenizer;

/// The text token `id` adds inside a text: " there" for "▁there". decode({id}) alone drops that space, because
/// decoder steps tied to the start of a text (Strip, Metaspace's first "▁") act on it. Behind a copy of itself the
/// token is out of their reach, so its text is decode({id, id}) minus decode({id}). A token that is not whole UTF-8
/// on its own (one byte of a character) keeps its stand-alone text (U+FFFD).
std::string token_text_in_context(const tokenizer& tok, int32_t id);

}  // namespace actorllm::text
