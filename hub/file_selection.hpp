// Which of a repository's files a model needs, decided from the Hub's file list (to download) or from a snapshot
// directory (to tell whether the cache alone will do). The weights are model.safetensors, or
// model.safetensors.index.json and every shard it names, as the loader reads them (model/safetensors.cpp);
// .bin/.pt/.pth checkpoints are pickled Python and are never fetched.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::hub {

/// What the caller will read from the snapshot.
struct wanted_files {
  bool config = true;     ///< config.json (and generation_config.json when the repo has one)
  bool weights = true;    ///< the safetensors checkpoint (off for --load-format dummy)
  bool tokenizer = true;  ///< tokenizer.json (and tokenizer_config.json, special_tokens_map.json,
                          ///< chat_template.jinja when the repo has them)
};

/// The files to fetch for `wanted` out of `siblings` (the repo's files at the revision), config first. The shards
/// of a sharded checkpoint are not listed here: they come from the index (index_shards) once it is downloaded.
struct file_selection {
  std::vector<std::string> files;
  bool sharded = false;            ///< files holds model.safetensors.index.json
  std::vector<std::string> notes;  ///< things worth a warning (no tokenizer.json in a model repo)
};

/// Throws hub_error naming the repo and revision when the repo lacks config.json (and it is wanted), has no
/// safetensors checkpoint (naming the .bin/.pt files it has instead, which are refused), or, for a tokenizer alone,
/// lacks tokenizer.json.
file_selection select_files(std::string_view repo, std::string_view revision, const std::vector<std::string>& siblings,
                            const wanted_files& wanted);

/// The shard files model.safetensors.index.json's weight_map names, each once, sorted. `where` names the index in
/// messages. Throws hub_error for JSON without a weight_map, or a shard that is not a plain file name.
std::vector<std::string> index_shards(std::string_view index_json, std::string_view where);

/// The files `dir` lacks for `wanted` (empty: it is complete): config.json, tokenizer.json, model.safetensors or
/// the index and every shard it names (an unreadable index counts as missing).
std::vector<std::string> missing_files(const std::filesystem::path& dir, const wanted_files& wanted);

/// Whether `name` is a safe relative path inside a repo: not empty or absolute, no empty, "." or ".." component, no
/// backslash or control character.
bool is_safe_repo_file(std::string_view name);

}  // namespace actorllm::hub
