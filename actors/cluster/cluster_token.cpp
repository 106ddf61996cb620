// Cluster token strength: see cluster_token.hpp.
#include "actors/cluster/cluster_token.hpp"

#include "actorllm/error.hpp"

#include <fmt/format.h>

#include <bitset>

namespace actorllm::actors {

std::optional<std::string> cluster_token_weakness(std::string_view token) {
  if (token.empty())
    return std::string{"no cluster token was given"};
  if (token.size() < min_cluster_token_chars)
    return fmt::format("the cluster token has {} characters, fewer than the {} a token needs", token.size(),
                       min_cluster_token_chars);
  std::bitset<256> seen;
  for (char c : token)
    seen.set(static_cast<unsigned char>(c));
  if (seen.count() < min_cluster_token_distinct)
    return fmt::format(
        "the cluster token uses only {} distinct characters (a token needs at least {}: it must be "
        "random, not a word or a repeated pattern)",
        seen.count(), min_cluster_token_distinct);
  return std::nullopt;
}

void check_cluster_token(std::string_view token, std::string_view source) {
  if (auto weakness = cluster_token_weakness(token))
    throw actorllm::error{
        errc::invalid_config,
        fmt::format("{} ({}). Use a random token of at least {} characters, e.g. `openssl rand -hex 32`, or start the "
                    "head without one: it generates one and prints it",
                    *weakness, source, min_cluster_token_chars)};
}

}  // namespace actorllm::actors
