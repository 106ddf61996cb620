// Rotary position embedding parameters as Hugging Face config.json spells them; shared by every backend.
#pragma once

#include <cstdint>

namespace actorllm {

/// `rope_scaling` of config.json. `none` when the field is null or absent.
struct rope_scaling {
  enum class kind : uint8_t { none, linear, llama3 };
  kind type = kind::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
  /// Field by field; a parsed value keeps the defaults in the fields its kind does not use, so equal settings compare
  /// equal.
  friend bool operator==(const rope_scaling&, const rope_scaling&) = default;
};

/// Everything a backend needs to rotate q and k.
struct rope_config {
  int64_t head_dim = 0;  // rotary dimension (the full head_dim for the Llama family)
  double theta = 10000.0;
  rope_scaling scaling;
};

}  // namespace actorllm
