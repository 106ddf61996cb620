// Where `serve` and `generate` read the model and the tokenizer from: a local directory as given, or a Hugging Face
// Hub repo id ("meta-llama/Llama-3.1-8B-Instruct") resolved to a snapshot of the local Hugging Face cache, the
// missing files downloaded first (hub/model_resolver.hpp) — vLLM's MODEL, --tokenizer, --revision,
// --tokenizer-revision and --download-dir.
#pragma once

#include <string>

namespace actorllm::app {

/// What the command line (or the settings file) named.
struct model_location_request {
  std::string model;               ///< a directory or a repo id
  std::string tokenizer;           ///< a directory or a repo id; empty: the model's
  std::string revision;            ///< --revision: branch, tag or commit of the model (empty: main)
  std::string tokenizer_revision;  ///< --tokenizer-revision (empty: --revision)
  std::string download_dir;        ///< --download-dir: the Hugging Face cache to use (empty: from the environment)
  bool load_weights = true;        ///< false for --load-format dummy: config and tokenizer only
  bool tokenizer_needed = true;    ///< false with --skip-tokenizer-init
};

/// The directories to read.
struct model_location {
  std::string model_dir;
  std::string tokenizer_dir;  ///< empty when the request named no tokenizer (the model's directory serves)
};

/// Resolves both names. Throws hub::hub_error (a std::runtime_error) with the whole explanation.
model_location resolve_model_location(const model_location_request& request);

}  // namespace actorllm::app
