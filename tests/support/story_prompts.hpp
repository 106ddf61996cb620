// 32 distinct stories260K prompts that each generate for a while at temperature 0: the load of the failover tests.
#pragma once

#include <string>
#include <vector>

namespace actorllm::test {

inline std::vector<std::string> story_prompts() {
  const char* who[] = {"a cat", "a dog", "Lily", "Tom", "a bird", "the sun", "a fish", "Ben"};
  const char* what[] = {"went to the park", "found a box", "was sad", "saw a tree"};
  std::vector<std::string> out;
  for (const char* w : who)
    for (const char* v : what)
      out.push_back(std::string{"Once upon a time, "} + w + " " + v + ".");
  return out;
}

}  // namespace actorllm::test
