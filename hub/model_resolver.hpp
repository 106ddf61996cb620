// A model or tokenizer named as vLLM takes it: a local directory, or a Hugging Face Hub repo id resolved to a
// snapshot directory of the local Hugging Face cache. A snapshot that already holds every file needed is used with
// no network at all; otherwise the missing files are downloaded from the Hub (never in offline mode), each checked
// against the Hub's checksum before it enters the cache. The cache is huggingface_hub's own layout
// (cache_layout.hpp), so `huggingface-cli download`, vLLM and this engine share one.
#pragma once

#include "hub/file_selection.hpp"
#include "hub/hub_settings.hpp"

#include <filesystem>
#include <string>
#include <string_view>

namespace actorllm::hub {

/// What to resolve.
struct resolve_request {
  std::string repo;               ///< "org/name" or "name"
  std::string revision = "main";  ///< a branch, tag or commit hash
  wanted_files wanted;
};

/// The snapshot directory of `request.repo` at `request.revision` holding every file `request.wanted` needs:
/// the cached one when complete, else completed by downloading from settings.endpoint (refs/{revision} then
/// records the commit). Throws hub_error naming the repo, revision, file and cache path: offline with a file
/// missing, a gated, private or missing repo, revision or file, a repo with no safetensors, a checksum that does
/// not match (that blob is deleted), the Hub unreachable.
std::filesystem::path resolve_snapshot(const resolve_request& request, const hub_settings& settings);

/// `name` as a directory to read: an existing directory as given; else, when it is a repo id, resolve_snapshot of
/// it at `revision` (empty: main). Throws hub_error for a name that is neither (or a plain file).
std::filesystem::path resolve_model_path(const std::string& name, const std::string& revision,
                                         const wanted_files& wanted, const hub_settings& settings);

}  // namespace actorllm::hub
