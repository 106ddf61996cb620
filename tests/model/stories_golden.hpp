// stories260K's golden file (../shared/models/stories260K/reference/expected_outputs.json, from an independent
// float64 implementation): the greedy run from BOS and the reference prompts with their first-step logits. For the
// model suites; header-only.
#pragma once

#include "support/test_paths.hpp"

#include <simdjson.h>

#include <cstdint>
#include <vector>

namespace actorllm::test {

struct stories_golden_prompt {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_output_ids;
  std::vector<double> first_step_logits;
};

struct stories_golden {
  std::vector<int32_t> bos_prompt_ids;
  std::vector<int32_t> bos_output_ids;
  std::vector<stories_golden_prompt> prompts;
};

inline std::vector<int32_t> golden_int_array(simdjson::dom::element e) {
  std::vector<int32_t> out;
  for (auto v : e.get_array())
    out.push_back(static_cast<int32_t>(int64_t(v)));
  return out;
}

/// The golden file, read once.
inline const stories_golden& load_stories_golden() {
  static const stories_golden g = [] {
    simdjson::dom::parser parser;
    auto path = model_dir("stories260K") / "reference" / "expected_outputs.json";
    simdjson::dom::element doc = parser.load(path.string());
    stories_golden out;
    out.bos_prompt_ids = golden_int_array(doc["greedy_from_bos"]["prompt_ids"]);
    out.bos_output_ids = golden_int_array(doc["greedy_from_bos"]["output_ids"]);
    for (auto p : doc["prompts"].get_array()) {
      stories_golden_prompt gp;
      gp.prompt_ids = golden_int_array(p["prompt_ids"]);
      gp.greedy_output_ids = golden_int_array(p["greedy_output_ids"]);
      for (auto v : p["first_step_logits"].get_array())
        gp.first_step_logits.push_back(double(v));
      out.prompts.push_back(std::move(gp));
    }
    return out;
  }();
  return g;
}

}  // namespace actorllm::test
