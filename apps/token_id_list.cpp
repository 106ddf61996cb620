// Token ids given on the command line.
#include "apps/token_id_list.hpp"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

namespace actorllm::app {

std::vector<int32_t> parse_token_id_list(std::string_view list, std::string_view flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < list.size()) {
    if (list[i] == ',' || list[i] == ' ') {
      ++i;
      continue;
    }
    size_t end = list.find_first_of(", ", i);
    if (end == std::string_view::npos)
      end = list.size();
    const std::string_view item = list.substr(i, end - i);
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (ec != std::errc{} || ptr != item.data() + item.size() || id < 0)
      throw std::invalid_argument(fmt::format("{}: '{}' is not a non-negative token id", flag, item));
    ids.push_back(id);
    i = end;
  }
  if (ids.empty())
    throw std::invalid_argument(fmt::format("{}: no token ids given", flag));
  return ids;
}

}  // namespace actorllm::app
