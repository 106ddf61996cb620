// Repo ids and revisions: see repo_id.hpp.
#include "hub/repo_id.hpp"

namespace actorllm::hub {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool valid_part(std::string_view part, std::size_t max_size) {
  if (part.empty() || part.size() > max_size || !word_char(part.front()) || !word_char(part.back()))
    return false;
  for (char c : part)
    if (!word_char(c) && c != '-' && c != '.')
      return false;
  return true;
}

}  // namespace

bool is_repo_id(std::string_view name) {
  if (name.find("--") != std::string_view::npos || name.find("..") != std::string_view::npos || name.ends_with(".git"))
    return false;
  const auto slash = name.find('/');
  if (slash == std::string_view::npos)
    return valid_part(name, 96);
  return valid_part(name.substr(0, slash), 96) && valid_part(name.substr(slash + 1), 96);
}

std::string repo_folder_name(std::string_view repo) {
  std::string out = "models--";
  for (char c : repo) {
    if (c == '/')
      out += "--";
    else
      out += c;
  }
  return out;
}

bool is_commit_hash(std::string_view revision) {
  if (revision.size() != 40)
    return false;
  for (char c : revision)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

bool is_valid_revision(std::string_view revision) { return is_safe_relative_path(revision); }

bool is_safe_relative_path(std::string_view path) {
  if (path.empty() || path.front() == '/')
    return false;
  for (char c : path)
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return false;
  std::string_view rest = path;
  while (true) {
    const auto slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..")
      return false;
    if (slash == std::string_view::npos)
      return true;
    rest = rest.substr(slash + 1);
  }
}

}  // namespace actorllm::hub
