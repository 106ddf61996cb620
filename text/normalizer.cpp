// Normalizer steps.
#include "text/normalizer.hpp"

namespace actorllm::text {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  size_t pos = s.find(from);
  if (pos == std::string::npos)
    return;
  std::string out;
  out.reserve(s.size() + (to.size() > from.size() ? s.size() / 2 : 0));
  size_t last = 0;
  while (pos != std::string::npos) {
    out.append(s, last, pos - last);
    out.append(to);
    last = pos + from.size();
    pos = s.find(from, last);
  }
  out.append(s, last, std::string::npos);
  s = std::move(out);
}

void prepend_normalizer::normalize(std::string& s) const {
  if (!s.empty())
    s.insert(0, prefix_);
}

void replace_normalizer::normalize(std::string& s) const {
  if (!regex_) {
    replace_all(s, literal_, content_);
    return;
  }
  std::string out;
  size_t last = 0;
  bool any = false;
  regex_->for_each_match(s, [&](size_t b, size_t e) {
    any = true;
    out.append(s, last, b - last);
    out.append(content_);
    last = e;
  });
  if (!any)
    return;
  out.append(s, last, std::string::npos);
  s = std::move(out);
}

}  // namespace actorllm::text
