// Cluster token strength (actors/cluster/cluster_token.hpp): short, empty and low-variety tokens are refused with a
// message that says why and where the token came from, never the token; random tokens of the minimum length pass.
#include "actors/cluster/cluster_token.hpp"

#include "actorllm/error.hpp"
#include "actors/cluster/control_network.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm;
using namespace actorllm::actors;

TEST_CASE("cluster token: too short, empty or too uniform is weak, long random tokens pass") {
  CHECK(cluster_token_weakness("").value() == "no cluster token was given");
  CHECK(cluster_token_weakness("abc").value().find("3 characters, fewer than the 32") != std::string::npos);
  CHECK(cluster_token_weakness("0123456789abcdef0123456789abcde").has_value());  // 31 characters
  CHECK(cluster_token_weakness(std::string(64, 'a')).value().find("only 1 distinct") != std::string::npos);
  CHECK(cluster_token_weakness("abcdefgabcdefgabcdefgabcdefgabcdefg").has_value());  // 7 distinct
  CHECK_FALSE(cluster_token_weakness("0123456789abcdef0123456789abcdef").has_value());
  CHECK_FALSE(cluster_token_weakness(new_control_key()).has_value());
}

TEST_CASE("cluster token: enable_network refuses a weak token before any socket exists, naming the flag") {
  caf::actor_system_config cfg;
  try {
    enable_network(cfg, control_tls{}, "secret-password");
    FAIL("a weak token was accepted");
  } catch (const actorllm::error& e) {
    const std::string what = e.what();
    CHECK(what.find("--cluster-token or $ACTORLLM_CLUSTER_TOKEN") != std::string::npos);
    CHECK(what.find("secret-password") == std::string::npos);
  }
  caf::actor_system_config ok;
  CHECK_NOTHROW(enable_network(ok, control_tls{}, new_control_key()));
}
