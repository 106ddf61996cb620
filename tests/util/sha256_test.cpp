// util/sha256.hpp's streaming digest (the Hub downloads check files with it as they arrive) against the one-shot one.
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm::util;

TEST_CASE("sha256_stream over pieces equals the one-shot digest and starts over after finish") {
  std::string text;
  for (int i = 0; i < 100000; ++i)
    text += static_cast<char>('a' + i % 26);
  sha256_stream s;
  for (std::size_t at = 0; at < text.size(); at += 777)
    s.update(std::string_view{text}.substr(at, 777));
  CHECK(to_hex(s.finish()) == to_hex(sha256(text)));
  s.update("abc");
  CHECK(to_hex(s.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  s.update("discarded");
  s.reset();
  CHECK(to_hex(s.finish()) == to_hex(sha256(std::string_view{})));
}
