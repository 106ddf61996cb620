// The Hub's answers: see hub_api.hpp.
#include "hub/hub_api.hpp"

#include "hub/file_selection.hpp"
#include "hub/hub_error.hpp"
#include "hub/repo_id.hpp"

#include <fmt/format.h>
#include <simdjson.h>

namespace actorllm::hub {

repo_info parse_repo_info(std::string_view json, std::string_view where) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string text{json};
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    throw hub_error(fmt::format("{}: the answer is not JSON ({})", where, simdjson::error_message(err)));
  repo_info info;
  std::string_view sha;
  if (root["sha"].get(sha) != simdjson::SUCCESS || !is_commit_hash(sha))
    throw hub_error(fmt::format("{}: the answer has no commit hash ('sha')", where));
  info.sha = std::string{sha};
  simdjson::dom::array siblings;
  if (root["siblings"].get(siblings) != simdjson::SUCCESS)
    throw hub_error(fmt::format("{}: the answer has no file list ('siblings')", where));
  for (simdjson::dom::element sibling : siblings) {
    std::string_view name;
    if (sibling["rfilename"].get(name) != simdjson::SUCCESS)
      throw hub_error(fmt::format("{}: a file of 'siblings' has no rfilename", where));
    if (!is_safe_repo_file(name))
      throw hub_error(fmt::format("{}: the file name '{}' reaches outside the repository", where, name));
    info.siblings.emplace_back(name);
  }
  return info;
}

std::string describe_http_failure(int status, const std::optional<std::string>& error_code,
                                  const std::optional<std::string>& error_message, const failure_context& at) {
  const std::string code = error_code.value_or("");
  const std::string said = error_message ? fmt::format(" (the Hub says: {})", *error_message) : std::string{};
  const std::string what = at.file.empty() ? fmt::format("{} at revision {}", at.repo, at.revision)
                                           : fmt::format("{} of {} at revision {}", at.file, at.repo, at.revision);
  if ((status == 401 || status == 404) && code == "RepoNotFound")
    return fmt::format("{}: {} from {}: no repository {} on {}{}{}", what, status, at.url, at.repo, at.endpoint,
                       at.token_source.empty() ? " (or a private one: set HF_TOKEN to a token with access)"
                                               : fmt::format(" that the token from {} can see", at.token_source),
                       said);
  if (status == 403 || code == "GatedRepo")
    return fmt::format(
        "{}: {} from {}: a gated model: ask for access on {}/{} and set HF_TOKEN to a token of an account that has "
        "it{}{}",
        what, status == 403 ? "403 Forbidden" : fmt::format("HTTP {}", status), at.url, at.endpoint, at.repo,
        at.token_source.empty() ? " (no token was sent)"
                                : fmt::format(" (the token from {} has none)", at.token_source),
        said);
  if (status == 401) {
    if (at.token_source.empty())
      return fmt::format(
          "{}: 401 Unauthorized from {}: the repository does not exist, or it is private or gated and needs a token: "
          "set HF_TOKEN to a token of an account with access{}",
          what, at.url, said);
    return fmt::format(
        "{}: 401 Unauthorized from {}: the token from {} was not accepted for it (invalid or expired, or the "
        "repository does not exist or is private to another account){}",
        what, at.url, at.token_source, said);
  }
  if (status == 404) {
    if (code == "RevisionNotFound")
      return fmt::format("{}: 404 from {}: the repository has no revision '{}' (a branch, tag or commit hash){}", what,
                         at.url, at.revision, said);
    if (code == "EntryNotFound")
      return fmt::format("{}: 404 from {}: the repository has no file {} at that revision{}", what, at.url, at.file,
                         said);
    return fmt::format("{}: 404 Not Found from {}: no such repository, revision{}{}", what, at.url,
                       at.file.empty() ? "" : " or file", said);
  }
  return fmt::format("{}: HTTP {} from {}{}", what, status, at.url, said);
}

}  // namespace actorllm::hub
