// The model-source flags `serve` and `generate` share: where a Hub-named model comes from.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace actorllm::app {

/// --revision, --tokenizer-revision and --download-dir (vLLM's), for a model or tokenizer given by Hub name.
inline void add_hub_flags(CLI::App& sub, std::string& revision, std::string& tokenizer_revision,
                          std::string& download_dir) {
  sub.add_option("--revision", revision,
                 "The model's branch, tag or commit hash on the Hugging Face Hub (default: main)");
  sub.add_option("--tokenizer-revision", tokenizer_revision,
                 "The tokenizer's branch, tag or commit hash on the Hub (default: --revision)");
  sub.add_option("--download-dir", download_dir,
                 "The Hugging Face cache to find and download models in (default: $HF_HUB_CACHE, else "
                 "$HF_HOME/hub, else ~/.cache/huggingface/hub)");
}

}  // namespace actorllm::app
