// --generation-config: the sampling defaults a model's generation_config.json supplies (vLLM's
// `get_diff_sampling_param`): temperature, top_p, top_k, min_p, repetition_penalty and max_new_tokens.
#pragma once

#include "net/openai/requests.hpp"

#include <filesystem>
#include <string>
#include <string_view>

namespace actorllm::net::openai {

/// The defaults in one generation_config.json. Throws std::runtime_error naming the file when it cannot be read,
/// is not a JSON object, or holds a field of the wrong type.
sampling_defaults read_generation_config(const std::filesystem::path& file);

/// The defaults `setting` selects: "vllm" none; "auto" the model directory's generation_config.json when there is
/// one (none otherwise); anything else is a directory that must hold a generation_config.json (throws
/// std::runtime_error naming the file when it is missing or invalid).
sampling_defaults resolve_generation_config(std::string_view setting, const std::filesystem::path& model_dir);

/// "temperature=0.7, top_p=0.9" for the start-up log; empty when `d` sets nothing.
std::string describe(const sampling_defaults& d);

}  // namespace actorllm::net::openai
