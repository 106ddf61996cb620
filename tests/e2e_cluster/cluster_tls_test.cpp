// The control plane over TLS (actors/cluster/control_network.hpp) on a simulated cluster whose head and agents all hold
// certificates of one CA: TP x PP over two nodes, and mp on this node, give the golden ids; a node without TLS, a
// node of another CA, `actorllm status` without TLS and an engine without TLS are refused with a hint; and those
// refused handshakes cost the nodes already joined nothing.
#include "actorllm/llm.hpp"
#include "e2e_cluster/cluster_harness.hpp"
#include "support/golden_ids.hpp"
#include "support/test_paths.hpp"
#include "support/test_pki.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

using test::golden_case;
using test::greedy_from_bos;

engine_config tls_config(const test::test_pki& pki, int tp, int pp, const std::string& executor) {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.kv_cache_memory = size_t{4} << 20;
  c.distributed_executor_backend = executor;
  c.cluster_tls_certificate = pki.cert;
  c.cluster_tls_key = pki.key;
  c.cluster_tls_ca_file = pki.ca;
  return c;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cluster over TLS: strangers are refused, the joined nodes stay, tp 2 x pp 2 gives the golden ids") {
  test::test_pki pki;
  test::sim_cluster::options o;
  o.n_nodes = 2;
  o.devices_per_node = 2;
  o.node_args = pki.flags();
  test::sim_cluster cluster{o};
  CHECK(contains(cluster.head().log_text(), "(TLS)"));

  // Both try for a few seconds, then give up with a hint.
  auto& plain = cluster.start_agent("plain", 1, cluster.token(), {});
  auto& stranger = cluster.start_agent(
      "stranger", 1, cluster.token(),
      {"--cluster-tls-cert", pki.other_cert, "--cluster-tls-key", pki.other_key, "--cluster-tls-ca", pki.other_ca});
  const auto status = cluster.status(cluster.token(), {});
  CHECK(status.status != 0);
  CHECK(contains(status.out, "does not use TLS"));
  REQUIRE(plain.wait_for(30s).has_value());
  REQUIRE(stranger.wait_for(30s).has_value());
  CHECK(*plain.exit_status != 0);
  CHECK(*stranger.exit_status != 0);
  CHECK_MESSAGE(contains(plain.log_text(), "does not use TLS"), plain.log_text());
  CHECK_MESSAGE(contains(stranger.log_text(), "this process uses TLS"), stranger.log_text());

  // Each refused handshake left an OpenSSL error behind on the head; its nodes must not pay for it.
  std::this_thread::sleep_for(1500ms);
  const auto listed = cluster.status();
  INFO(listed.out);
  CHECK(contains(listed.out, ": 2 node(s), 2 healthy"));

  {
    engine_config no_tls = tls_config(pki, 2, 2, "cluster");
    no_tls.cluster_tls_certificate = no_tls.cluster_tls_key = no_tls.cluster_tls_ca_file = "";
    no_tls.cluster_address = cluster.head_address();
    no_tls.cluster_token = cluster.token();
    std::string message;
    try {
      LLM refused{no_tls};
    } catch (const actorllm::error& e) {
      message = e.what();
    }
    CHECK(contains(message, "does not use TLS"));
  }

  engine_config c = tls_config(pki, 2, 2, "cluster");
  c.cluster_address = cluster.head_address();
  c.cluster_token = cluster.token();
  LLM llm{c};
  const golden_case g = greedy_from_bos();
  CHECK(test::greedy_ids(llm, g) == g.output);
}

TEST_CASE("mp over TLS: tp 2 gives the golden ids") {
  ::setenv("ACTORLLM_WORKER_BIN", test::actorllm_binary().c_str(), 1);
  test::test_pki pki;
  LLM llm{tls_config(pki, 2, 1, "mp")};
  CHECK(llm.info().executor == "mp");
  const golden_case g = greedy_from_bos();
  CHECK(test::greedy_ids(llm, g) == g.output);
}

TEST_CASE("an engine with half a TLS setting fails before it starts anything, naming the missing part") {
  test::test_pki pki;
  engine_config c = tls_config(pki, 2, 1, "mp");
  c.cluster_tls_ca_file = "";
  std::string message;
  try {
    LLM llm{c};
  } catch (const actorllm::error& e) {
    message = e.what();
  }
  CHECK(contains(message, "--cluster-tls-ca"));
}
