// Lets doctest print std::vector<int> in failed checks (lists of HTTP statuses, for one).
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace doctest {
template <>
struct StringMaker<std::vector<int>> {
  static String convert(const std::vector<int>& v) {
    std::string out = "{";
    for (std::size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + std::to_string(v[i]);
    return (out + "}").c_str();
  }
};
}  // namespace doctest
