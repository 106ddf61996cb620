// An environment variable set (or unset) for one scope, its old value restored after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace actorllm::test {

/// Sets `name` to `value` (unsets it for nullopt) until the end of the scope, then restores what it was.
class scoped_env {
 public:
  scoped_env(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name))
      old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace actorllm::test
