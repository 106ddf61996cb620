// What a cluster token must be. The token is the control plane's shared secret (the gate's HMAC key,
// control_gate.hpp): whoever holds it may join the cluster and drive its workers. A node that connects proves the
// token to the peer it reaches, so a peer posing as the head could test guesses of a weak token offline; only a long
// random token makes that hopeless. Weak tokens are therefore refused when a process starts, naming where the token
// came from and how to make a good one.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace actorllm::actors {

/// The fewest characters a cluster token may have (`openssl rand -hex 16` gives 32: 128 random bits).
inline constexpr std::size_t min_cluster_token_chars = 32;
/// The fewest distinct characters (a long run of one or two characters is not a secret).
inline constexpr std::size_t min_cluster_token_distinct = 8;

/// Why `token` is too weak to be a cluster token, or nullopt when it is acceptable.
std::optional<std::string> cluster_token_weakness(std::string_view token);

/// Throws actorllm::error (invalid_config) when `token` is too weak; the message names the token's source, e.g.
/// "--cluster-token or $ACTORLLM_CLUSTER_TOKEN", never the token itself.
void check_cluster_token(std::string_view token, std::string_view source);

}  // namespace actorllm::actors
