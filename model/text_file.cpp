// Reading a small text file whole.
#include "model/text_file.hpp"

#include "model/model_error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace actorllm::model {

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw model_error(fmt::format("{}: cannot read: is a directory", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw model_error(fmt::format("{}: cannot read: {}", path.string(), std::strerror(errno)));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    throw model_error(fmt::format("{}: read error", path.string()));
  return text;
}

}  // namespace actorllm::model
