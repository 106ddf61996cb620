// The one main() of every doctest binary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  // Line-buffered even into a pipe (ctest's), so a failed check is printed where it happened, among the engine's
  // log lines on stderr, and not only when the binary exits: a log cut short still shows what failed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Tests load models without a packed-weight cache in the user's home (and so as they always have), unless the run
  // asks for one; the cache's own tests make theirs in temporary directories. Processes they start inherit it.
  ::setenv("ACTORLLM_PACKED_WEIGHT_CACHE", "off", 0);
  doctest::Context context{argc, argv};
  return context.run();
}
