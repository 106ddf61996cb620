// stories260K's golden greedy run (../shared/models/stories260K/reference/expected_outputs.json, greedy_from_bos),
// and that run through an LLM: what the executor and layout tests compare against. Header-only.
#pragma once

#include "actorllm/llm.hpp"
#include "support/test_paths.hpp"

#include <simdjson.h>

#include <cstdint>
#include <vector>

namespace actorllm::test {

struct golden_case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

inline std::vector<int32_t> golden_int_list(simdjson::dom::element e) {
  std::vector<int32_t> out;
  for (auto v : e.get_array())
    out.push_back(static_cast<int32_t>(int64_t(v)));
  return out;
}

/// The prompt (BOS) and the golden greedy output ids.
inline golden_case greedy_from_bos() {
  simdjson::dom::parser parser;
  auto doc = parser.load((model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  return {golden_int_list(doc["greedy_from_bos"]["prompt_ids"]), golden_int_list(doc["greedy_from_bos"]["output_ids"])};
}

/// The golden run cut after `n` output tokens: BOS and those tokens as the prompt, the rest as the output (greedy
/// decoding continues its own output). A prompt longer than a block, so its second run reads the prefix cache.
inline golden_case greedy_from_bos_after(size_t n) {
  golden_case g = greedy_from_bos();
  golden_case cut;
  cut.prompt = g.prompt;
  cut.prompt.insert(cut.prompt.end(), g.output.begin(), g.output.begin() + static_cast<std::ptrdiff_t>(n));
  cut.output.assign(g.output.begin() + static_cast<std::ptrdiff_t>(n), g.output.end());
  return cut;
}

/// `llm`'s greedy output for g.prompt, as long as g.output (EOS ignored).
inline std::vector<int32_t> greedy_ids(LLM& llm, const golden_case& g) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = static_cast<int32_t>(g.output.size());
  p.ignore_eos = true;
  return llm.generate(prompt{g.prompt}, p).outputs.front().token_ids;
}

}  // namespace actorllm::test
