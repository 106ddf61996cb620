// One hexadecimal digit's value, shared by the parsers that decode %XX, <0xXX> and \xXX escapes.
#pragma once

namespace actorllm {

/// The value of hex digit `c` (either case), or -1 when `c` is not one.
constexpr int hex_digit_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

}  // namespace actorllm
