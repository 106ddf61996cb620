// Reading a small text file (config.json, an index) whole, with the error the loaders' callers expect.
#pragma once

#include <filesystem>
#include <string>

namespace actorllm::model {

/// The whole contents of `path`. Throws model_error naming the file and the reason when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace actorllm::model
