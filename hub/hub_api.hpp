// The Hub's answers as data: the model-info JSON of GET /api/models/{repo}/revision/{revision} (the commit and the
// file list), and what an HTTP failure means for the user (a gated or private repo, a missing revision or file),
// from the status and the Hub's X-Error-Code / X-Error-Message headers. No I/O here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::hub {

/// A repo at one revision.
struct repo_info {
  std::string sha;                    ///< the commit the revision names
  std::vector<std::string> siblings;  ///< siblings[].rfilename: every file at that commit
};

/// Parses the model-info JSON; `where` (the URL) names it in messages. Throws hub_error when it is not JSON, has
/// no 40-hex `sha`, or a sibling's rfilename is not a safe relative path.
repo_info parse_repo_info(std::string_view json, std::string_view where);

/// The request a failure belongs to, for its message.
struct failure_context {
  std::string_view repo;
  std::string_view revision;
  std::string_view file;  ///< empty: the model-info request
  std::string_view url;
  std::string_view endpoint;
  std::string_view token_source;  ///< where the token sent came from; empty: none was sent
};

/// The message for an HTTP failure: 401 and 403 say the repo is gated or private and what to do with HF_TOKEN,
/// 404 says which of repo, revision or file does not exist, anything else gives the status and the server's words.
std::string describe_http_failure(int status, const std::optional<std::string>& error_code,
                                  const std::optional<std::string>& error_message, const failure_context& at);

}  // namespace actorllm::hub
