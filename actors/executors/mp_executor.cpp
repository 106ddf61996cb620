// The mp executor: worker processes on this node, each hosting one shard.
#include "actors/executors/mp_executor.hpp"

#include "actorllm/error.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/gated_multiplexer.hpp"
#include "actors/executors/worker_replica.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

namespace actorllm::actors {
namespace {

/// Starts workers as children of this process (they die with it).
class local_launcher final : public worker_launcher {
 public:
  /// `tls`, `control_key` and `message_limit`: the engine's control-plane transport, which its workers must speak
  /// too.
  local_launcher(std::string program, control_tls tls, std::string control_key, std::string message_limit,
                 int32_t dp_rank)
      : program_(std::move(program)),
        tls_(std::move(tls)),
        control_key_(std::move(control_key)),
        message_limit_(std::move(message_limit)),
        dp_rank_(dp_rank) {}
  std::string name() const override { return "mp executor"; }

  void start(int32_t index, const std::string& host, uint16_t port, const std::string& token) override {
    util::child_process::options o;
    o.program = program_;
    o.args = {"worker",
              "--registry",
              fmt::format("{}:{}", host, port),
              "--index",
              std::to_string(index),
              "--replica",
              std::to_string(dp_rank_)};
    o.env = tls_.environment();
    o.env.emplace_back(control_key_variable, control_key_);
    o.env.emplace_back(control_message_limit_variable, message_limit_);
    o.env.emplace_back("ACTORLLM_WORKER_TOKEN", token);
    processes_.push_back(std::make_shared<util::child_process>(o));
  }

  std::optional<std::string> dead_worker() override {
    for (size_t i = 0; i < processes_.size(); ++i)
      if (auto status = processes_[i]->exit_status())
        return fmt::format("replica {} worker {} (pid {}) exited with status {}", dp_rank_, i, processes_[i]->pid(),
                           *status);
    return std::nullopt;
  }

  void stop_all() override {
    // Workers exit by themselves once the engine's registry is gone; give them a moment, then make sure.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{2};
    for (auto& p : processes_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!p->wait_for(std::max(left, std::chrono::milliseconds{0})))
        p->kill(SIGKILL);
    }
    processes_.clear();
  }

  std::vector<std::shared_ptr<util::child_process>> local_processes() const override { return processes_; }

 private:
  std::string program_;
  control_tls tls_;
  std::string control_key_;
  std::string message_limit_;
  int32_t dp_rank_ = 0;
  std::vector<std::shared_ptr<util::child_process>> processes_;
};

}  // namespace

std::string worker_binary() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ACTORLLM_WORKER_BIN"); env != nullptr && *env != '\0') {
    if (!fs::exists(env))
      throw actorllm::error{errc::invalid_config, fmt::format("ACTORLLM_WORKER_BIN={} does not exist", env)};
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "actorllm")
    return self.string();
  if (!ec && fs::exists(self.parent_path() / "actorllm"))
    return (self.parent_path() / "actorllm").string();
  throw actorllm::error{errc::invalid_config,
                        "the mp executor runs shards in `actorllm worker` processes, but no actorllm binary was found "
                        "beside this program: set ACTORLLM_WORKER_BIN"};
}

std::string data_plane_host() {
  const char* env = std::getenv("ACTORLLM_HOST_IP");
  return env != nullptr && *env != '\0' ? std::string{env} : std::string{"127.0.0.1"};
}

replica build_mp_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot) {
  replica_plan plan = plan_replica(config, slot);
  plan.r.executor = "mp";
  return build_worker_replica(
      sys, config, std::move(plan),
      std::make_shared<local_launcher>(worker_binary(), control_tls::of(sys), control_key_of(sys),
                                       control_message_limit_of(sys), slot.dp_rank),
      data_plane_host());
}

}  // namespace actorllm::actors
