// The files a model needs: see file_selection.hpp.
#include "hub/file_selection.hpp"

#include "hub/hub_error.hpp"
#include "hub/repo_id.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace actorllm::hub {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view single_checkpoint = "model.safetensors";
constexpr std::string_view checkpoint_index = "model.safetensors.index.json";

bool listed(const std::vector<std::string>& siblings, std::string_view name) {
  return std::find(siblings.begin(), siblings.end(), name) != siblings.end();
}

// Weight files of formats this engine never reads, named in the refusal of a repo without safetensors.
bool refused_weight_file(std::string_view name) {
  for (std::string_view ext : {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".gguf", ".h5", ".msgpack"})
    if (name.ends_with(ext))
      return true;
  return false;
}

}  // namespace

bool is_safe_repo_file(std::string_view name) { return is_safe_relative_path(name); }

file_selection select_files(std::string_view repo, std::string_view revision, const std::vector<std::string>& siblings,
                            const wanted_files& wanted) {
  file_selection s;
  const auto take_if_listed = [&](std::string_view name) {
    if (listed(siblings, name))
      s.files.emplace_back(name);
  };
  if (wanted.config) {
    if (!listed(siblings, "config.json"))
      throw hub_error(fmt::format("{} (revision {}) has no config.json: it is not a transformers model repository",
                                  repo, revision));
    s.files.emplace_back("config.json");
    take_if_listed("generation_config.json");
  }
  if (wanted.tokenizer) {
    if (listed(siblings, "tokenizer.json")) {
      s.files.emplace_back("tokenizer.json");
    } else if (!wanted.config && !wanted.weights) {
      throw hub_error(
          fmt::format("{} (revision {}) has no tokenizer.json, the only tokenizer format read here", repo, revision));
    } else {
      s.notes.push_back(
          fmt::format("{} (revision {}) has no tokenizer.json: text prompts need --tokenizer", repo, revision));
    }
    for (std::string_view name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
      take_if_listed(name);
  }
  if (wanted.weights) {
    // The loader prefers the single file when both are there (model/safetensors.cpp): so does the download.
    if (listed(siblings, single_checkpoint)) {
      s.files.emplace_back(single_checkpoint);
    } else if (listed(siblings, checkpoint_index)) {
      s.files.emplace_back(checkpoint_index);
      s.sharded = true;
    } else {
      std::vector<std::string> refused;
      std::vector<std::string> other_safetensors;
      for (const std::string& name : siblings) {
        if (refused_weight_file(name))
          refused.push_back(name);
        else if (name.ends_with(".safetensors"))
          other_safetensors.push_back(name);
      }
      std::string what;
      if (!refused.empty())
        what = fmt::format(
            " It has {}: .bin/.pt/.pth checkpoints are pickled Python, never loaded here (convert the model to "
            "safetensors, or pick a revision that has them)",
            fmt::join(refused, ", "));
      if (!other_safetensors.empty())
        what += fmt::format(" It has safetensors under other names ({}), which the loader does not read",
                            fmt::join(other_safetensors, ", "));
      throw hub_error(fmt::format("{} (revision {}) has no model.safetensors or model.safetensors.index.json.{}", repo,
                                  revision, what.empty() ? std::string{" It has no weights at all"} : what));
    }
  }
  return s;
}

std::vector<std::string> index_shards(std::string_view index_json, std::string_view where) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string text{index_json};
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    throw hub_error(fmt::format("{}: not valid JSON: {}", where, simdjson::error_message(err)));
  simdjson::dom::object weight_map;
  if (root["weight_map"].get(weight_map) != simdjson::SUCCESS)
    throw hub_error(fmt::format("{}: has no weight_map object", where));
  std::set<std::string> shards;
  for (auto [tensor, file] : weight_map) {
    std::string_view name;
    if (file.get(name) != simdjson::SUCCESS)
      throw hub_error(fmt::format("{}: weight_map entry for tensor '{}' is not a file name", where, tensor));
    // A shard is a file beside the index: never a path that reaches elsewhere.
    if (!is_safe_repo_file(name) || name.find('/') != std::string_view::npos)
      throw hub_error(fmt::format("{}: weight_map names shard '{}' for tensor '{}', which is not a plain file name",
                                  where, name, tensor));
    shards.emplace(name);
  }
  if (shards.empty())
    throw hub_error(fmt::format("{}: weight_map is empty", where));
  return {shards.begin(), shards.end()};
}

std::vector<std::string> missing_files(const fs::path& dir, const wanted_files& wanted) {
  std::vector<std::string> missing;
  std::error_code ec;
  const auto present = [&](std::string_view name) { return fs::is_regular_file(dir / std::string{name}, ec); };
  if (wanted.config && !present("config.json"))
    missing.emplace_back("config.json");
  if (wanted.tokenizer && !present("tokenizer.json"))
    missing.emplace_back("tokenizer.json");
  if (wanted.weights && !present(single_checkpoint)) {
    if (!present(checkpoint_index)) {
      missing.emplace_back(single_checkpoint);
    } else {
      std::ifstream in{dir / std::string{checkpoint_index}, std::ios::binary};
      std::stringstream text;
      text << in.rdbuf();
      try {
        for (const std::string& shard : index_shards(text.str(), checkpoint_index))
          if (!present(shard))
            missing.push_back(shard);
      } catch (const hub_error&) {
        missing.emplace_back(checkpoint_index);
      }
    }
  }
  return missing;
}

}  // namespace actorllm::hub
