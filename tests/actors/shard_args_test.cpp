// The shard's args as the runner's options: what a shard asks of its model_runner.
#include "actors/runtime/shard_actor.hpp"
#include "runner/model_runner.hpp"

#include <doctest/doctest.h>

using namespace actorllm;

TEST_CASE("shard_args carry --enforce-eager, max_num_seqs and max_model_len into the runner's graph options") {
  actors::shard_args a;
  CHECK(actors::shard_graph_options(a).enabled);  // graphs on by default, as vLLM
  a.enforce_eager = true;
  a.max_num_seqs = 64;
  a.max_model_len = 2048;
  const runner::graph_options o = actors::shard_graph_options(a);
  CHECK_FALSE(o.enabled);
  CHECK(o.max_num_seqs == 64);
  CHECK(o.max_model_len == 2048);
}
