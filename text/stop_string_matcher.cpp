// Stop-string matching over a sliding window of the streamed text.
#include "text/stop_string_matcher.hpp"

#include <algorithm>

namespace actorllm::text {

stop_string_matcher::stop_string_matcher(std::vector<std::string> stop_strings, bool include_stop_str_in_output)
    : include_(include_stop_str_in_output) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty())
      continue;
    max_length_ = std::max(max_length_, stop_strings[i].size());
    stops_.push_back(std::move(stop_strings[i]));
    original_index_.push_back(i);
  }
}

size_t stop_string_matcher::held_suffix(std::string_view text) const {
  if (include_)
    return 0;
  const size_t longest = std::min(text.size(), max_length_ == 0 ? 0 : max_length_ - 1);
  for (size_t k = longest; k > 0; --k) {
    const std::string_view suffix = text.substr(text.size() - k);
    for (const std::string& s : stops_) {
      if (s.size() > k && std::string_view{s}.substr(0, k) == suffix)
        return k;
    }
  }
  return 0;
}

stop_string_matcher::result stop_string_matcher::push(std::string_view delta) {
  result r;
  if (stopped_ || delta.empty())
    return r;
  if (stops_.empty()) {
    r.text = std::string{delta};
    return r;
  }
  std::string buffer = window_;
  buffer += delta;
  const size_t release_from = window_.size() - held_;  // everything before this was released already
  size_t best_pos = std::string::npos;
  size_t best = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    // Matches that end inside the old window were looked for by earlier calls.
    const size_t from = window_.size() >= stops_[i].size() ? window_.size() - stops_[i].size() + 1 : 0;
    const size_t pos = buffer.find(stops_[i], from);
    if (pos < best_pos) {
      best_pos = pos;
      best = i;
    }
  }
  if (best_pos != std::string::npos) {
    size_t end = include_ ? best_pos + stops_[best].size() : best_pos;
    end = std::max(end, release_from);
    r.text = buffer.substr(release_from, end - release_from);
    r.stop_index = original_index_[best];
    stopped_ = true;
    window_.clear();
    held_ = 0;
    return r;
  }
  const size_t hold = std::min(held_suffix(buffer), buffer.size() - release_from);
  r.text = buffer.substr(release_from, buffer.size() - hold - release_from);
  const size_t keep = std::min(buffer.size(), max_length_ - 1);
  window_ = buffer.substr(buffer.size() - keep);
  held_ = hold;
  return r;
}

std::string stop_string_matcher::finish() {
  if (stopped_)
    return {};
  std::string rest = window_.substr(window_.size() - held_);
  held_ = 0;
  return rest;
}

}  // namespace actorllm::text
