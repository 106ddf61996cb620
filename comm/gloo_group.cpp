// Rendezvous and full-mesh connect of a Gloo process group, and the translation of Gloo's errors.
#include "comm/gloo_group.hpp"

#include "comm/gloo_group_impl.hpp"
#include "util/check.hpp"

#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

namespace actorllm::comm {

namespace {

/// Gloo's view of a rendezvous_store: keys under "<group name>/", every wait bounded by the group's timeout.
/// Gloo (this version) keys each rank's addresses by the bare rank number, so a missing key names a missing rank.
class store_adapter final : public gloo::rendezvous::Store {
 public:
  store_adapter(rendezvous_store& store, const std::string& group, std::chrono::milliseconds timeout)
      : store_(store), group_(group), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override { store_.set(full_key(key), data); }

  std::vector<char> get(const std::string& key) override {
    if (auto it = fetched_.find(key); it != fetched_.end())
      return it->second;
    return fetch(key, timeout_);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    // Gloo passes its context timeout (the group's); the smaller of the two bounds the whole wait.
    const auto deadline = std::chrono::steady_clock::now() + std::min(timeout, timeout_);
    for (const auto& key : keys) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      fetched_[key] = fetch(key, std::max(left, std::chrono::milliseconds{0}));
    }
  }

 private:
  std::string full_key(const std::string& key) const { return group_ + "/" + key; }

  std::vector<char> fetch(const std::string& key, std::chrono::milliseconds timeout) {
    try {
      return store_.get(full_key(key), timeout);
    } catch (const std::exception& e) {
      int peer = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), peer);
      if (ec == std::errc{} && end == key.data() + key.size())
        throw comm_error(fmt::format("rank {} never joined ({})", peer, e.what()));
      throw;
    }
  }

  rendezvous_store& store_;
  std::string group_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::vector<char>> fetched_;  // values wait() already read, for the get() that follows
};

}  // namespace

std::string gloo_group::impl::describe(std::string_view what, int peer) const {
  std::string s = fmt::format("gloo group '{}' rank {} of {}: {}", owner->name_, owner->rank_, owner->size_, what);
  if (peer >= 0)
    s += fmt::format(" with rank {}", peer);
  return s;
}

void gloo_group::impl::fail(std::string_view what, int peer, std::string_view cause) {
  std::string message =
      describe(what, peer) + fmt::format(" failed (timeout {} ms): {}", owner->timeout().count(), cause);
  if (broken.empty())
    broken = message;
  throw comm_error(message);
}

gloo_group::gloo_group(rendezvous_store& store, std::string name, int rank, int size, gloo_group_options options)
    : name_(std::move(name)), rank_(rank), size_(size), options_(std::move(options)), impl_(std::make_unique<impl>()) {
  ACTORLLM_CHECK(size_ >= 1, "a process group needs at least one rank");
  ACTORLLM_CHECK(rank_ >= 0 && rank_ < size_, "rank outside its process group");
  ACTORLLM_CHECK(options_.timeout.count() > 0, "a process group needs a positive timeout");
  impl_->owner = this;
  impl_->guarded(fmt::format("binding the TCP transport to '{}'", options_.host), -1, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options_.host;
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
  });
  impl_->guarded("connecting to its peers", -1, [&] {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(options_.timeout);
    store_adapter adapter{store, name_, options_.timeout};
    context->connectFullMesh(adapter, impl_->device);
    impl_->context = std::move(context);
  });
}

gloo_group::~gloo_group() = default;

}  // namespace actorllm::comm
