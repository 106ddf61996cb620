// Hugging Face repository ids and revisions as huggingface_hub validates them, and the cache folder a repo id maps
// to ("meta-llama/Llama-3.1-8B-Instruct" -> "models--meta-llama--Llama-3.1-8B-Instruct").
#pragma once

#include <string>
#include <string_view>

namespace actorllm::hub {

/// Whether `name` is a repo id: "name" or "org/name", each part made of ASCII letters, digits, '-', '_' and '.',
/// starting and ending with a letter, digit or '_', no "--" or "..", not ending in ".git", the name at most 96
/// characters (huggingface_hub's validate_repo_id).
bool is_repo_id(std::string_view name);

/// The repo's folder in the cache: "models--" + the id with '/' replaced by "--".
std::string repo_folder_name(std::string_view repo);

/// Whether `revision` is a full commit hash (40 lowercase hexadecimal digits), which names a snapshot directly.
bool is_commit_hash(std::string_view revision);

/// Whether `path` is a safe relative path: not empty, not absolute, no empty, "." or ".." component, no backslash
/// or control character (a revision under refs/, a file inside a repo).
bool is_safe_relative_path(std::string_view path);

/// Whether `revision` (a branch, tag or commit, possibly with '/' like "refs/pr/1") can name a file under refs/:
/// is_safe_relative_path.
bool is_valid_revision(std::string_view revision);

}  // namespace actorllm::hub
