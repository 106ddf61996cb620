// A token's text in context: see token_text.hpp.
#include "text/token_text.hpp"

#include "text/tokenizer.hpp"

#include <string_view>

namespace actorllm::text {

std::string token_text_in_context(const tokenizer& tok, int32_t id) {
  static constexpr std::string_view replacement_char = "\xEF\xBF\xBD";
  const int32_t once[] = {id};
  std::string alone = tok.decode(once);
  if (alone.find(replacement_char) != std::string::npos)
    return alone;
  const int32_t twice[] = {id, id};
  std::string both = tok.decode(twice);
  if (!both.starts_with(alone))
    return alone;
  return both.substr(alone.size());
}

}  // namespace actorllm::text
