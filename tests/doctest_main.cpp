// The one main() of every doctest binary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv) {
  // Line-buffered even into a pipe (ctest's), so a failed check is printed where it happened, among the engine's
  // log lines on stderr, and not only when the binary exits: a log cut short still shows what failed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  doctest::Context context{argc, argv};
  return context.run();
}
