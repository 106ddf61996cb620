// Simulated multi-node mode for tests (DESIGN.md §5): a cluster head and N node agents, each its own
// `actorllm node` process on loopback with its stderr in a log file of a temp dir. The destructor stops them all
// (SIGTERM, then SIGKILL after 2 s); each one is also killed when the test process dies. Header-only; used by
// tests/e2e_cluster.
#pragma once

#include "support/die_with_parent.hpp"
#include "support/test_paths.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace actorllm::test {

/// One process of a simulated cluster.
struct sim_process {
  std::string name;  ///< "head", or the node id
  pid_t pid = -1;
  std::filesystem::path log;       ///< its stderr and stdout
  std::optional<int> exit_status;  ///< once reaped: the exit code, or 128 + the signal

  /// Whether it still runs (reaps it when it ended).
  bool running() {
    if (exit_status)
      return false;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid)
      return true;
    exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }

  /// Waits up to `timeout` for it to end; its exit status, or nullopt when it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    return exit_status;
  }

  /// Sends `signal` when it still runs.
  void kill(int signal) {
    if (running())
      ::kill(pid, signal);
  }

  /// Everything it logged so far.
  std::string log_text() const {
    std::ifstream in{log};
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

/// A head (registry only) and `n_nodes` agents with `devices_per_node` CPU devices each, all on 127.0.0.1.
class sim_cluster {
 public:
  struct options {
    int n_nodes = 2;
    int devices_per_node = 1;
    std::string token;  ///< empty: a random one
    std::chrono::milliseconds ready_timeout{20000};
    std::vector<std::string> node_args;  ///< extra flags for the head, every agent and `actorllm status` (TLS)
  };

  /// `n_nodes` agents (node-0, node-1, ...) with `devices_per_node` CPU devices each.
  sim_cluster(int n_nodes, int devices_per_node)
      : sim_cluster(options{n_nodes, devices_per_node, "", std::chrono::milliseconds{20000}, {}}) {}

  explicit sim_cluster(options o) : options_{std::move(o)} {
    dir_ = make_temp_dir("sim-cluster");
    if (options_.token.empty()) {
      std::random_device rd;
      options_.token = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
    }
    try {
      start_head();
      for (int i = 0; i < options_.n_nodes; ++i)
        start_agent(fmt::format("node-{}", i), options_.devices_per_node, options_.token);
      if (!wait_for_nodes(static_cast<size_t>(options_.n_nodes), options_.ready_timeout))
        throw std::runtime_error(fmt::format("the simulated cluster did not list {} nodes within {} ms; logs in {}",
                                             options_.n_nodes, options_.ready_timeout.count(), dir_.string()));
    } catch (...) {
      stop_all();
      throw;
    }
  }

  /// Stops every process; removes the logs unless ACTORLLM_KEEP_TEST_LOGS is set or a REQUIRE is unwinding.
  ~sim_cluster() {
    stop_all();
    if (std::getenv("ACTORLLM_KEEP_TEST_LOGS") == nullptr && std::uncaught_exceptions() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  sim_cluster(const sim_cluster&) = delete;
  sim_cluster& operator=(const sim_cluster&) = delete;

  /// HOST:PORT of the head's registry.
  const std::string& head_address() const { return head_address_; }
  uint16_t head_port() const { return head_port_; }
  const std::string& token() const { return options_.token; }
  const std::filesystem::path& dir() const { return dir_; }
  sim_process& head() { return processes_.front(); }
  /// The agent with this node id (or name), started by the constructor or start_agent.
  sim_process& process(const std::string& name) {
    for (auto& p : processes_)
      if (p.name == name)
        return p;
    throw std::out_of_range("no simulated process " + name);
  }

  /// Starts one more agent (`actorllm node --join`) with the cluster's node_args; it may be refused (a wrong
  /// token).
  sim_process& start_agent(const std::string& node_id, int devices, const std::string& token) {
    return start_agent(node_id, devices, token, options_.node_args);
  }
  /// The same with `node_args` of its own in place of the cluster's (a node without TLS, or of another CA).
  sim_process& start_agent(const std::string& node_id, int devices, const std::string& token,
                           const std::vector<std::string>& node_args) {
    std::vector<std::string> args{
        "node",      "--join", head_address_,     "--host", "127.0.0.1", "--cpu-devices", std::to_string(devices),
        "--node-id", node_id,  "--cluster-token", token};
    args.insert(args.end(), node_args.begin(), node_args.end());
    return spawn(node_id, args);
  }

  /// `actorllm status` against the head (stderr included in `out`), with the cluster's node_args.
  command_result status(const std::string& token) const { return status(token, options_.node_args); }
  /// The same with other flags in place of node_args.
  command_result status(const std::string& token, const std::vector<std::string>& node_args) const {
    std::string extra;
    for (const auto& a : node_args)
      extra += fmt::format(" '{}'", a);
    return run_command(fmt::format("'{}' status --address {} --cluster-token '{}'{} 2>&1", actorllm_binary().string(),
                                   head_address_, token, extra));
  }
  command_result status() const { return status(options_.token); }

  /// How many nodes the head lists, or nullopt when `actorllm status` fails.
  std::optional<size_t> node_count() const {
    const auto r = status();
    std::smatch m;
    static const std::regex header{R"(: (\d+) node\(s\))"};
    if (r.status != 0 || !std::regex_search(r.out, m, header))
      return std::nullopt;
    return static_cast<size_t>(std::stoul(m[1].str()));
  }

  /// Polls `actorllm status` until the head lists exactly `n` nodes; false on timeout.
  bool wait_for_nodes(size_t n, std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (node_count() == n)
        return true;
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
  }

  /// SIGTERM to everything still running, SIGKILL after 2 s.
  /// The agents first, so that none of them sees its head go away.
  void stop_all() {
    if (processes_.empty())
      return;
    auto stop = [](auto first, auto last) {
      for (auto it = first; it != last; ++it)
        it->kill(SIGTERM);
      for (auto it = first; it != last; ++it)
        if (!it->wait_for(std::chrono::milliseconds{2000})) {
          it->kill(SIGKILL);
          it->wait_for(std::chrono::milliseconds{2000});
        }
    };
    stop(std::next(processes_.begin()), processes_.end());
    stop(processes_.begin(), std::next(processes_.begin()));
  }

 private:
  void start_head() {
    std::vector<std::string> args{"node", "--head",        "--host", "127.0.0.1",       "--port",
                                  "0",    "--cpu-devices", "0",      "--cluster-token", options_.token};
    args.insert(args.end(), options_.node_args.begin(), options_.node_args.end());
    auto& head = spawn("head", args);
    static const std::regex listening{R"(Cluster head listening on ([0-9.]+):(\d+))"};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    for (;;) {
      const std::string text = head.log_text();
      std::smatch m;
      if (std::regex_search(text, m, listening)) {
        head_port_ = static_cast<uint16_t>(std::stoul(m[2].str()));
        head_address_ = fmt::format("{}:{}", m[1].str(), head_port_);
        return;
      }
      if (!head.running() || std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("the simulated cluster head did not start; its log:\n" + text);
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }

  // fork + exec rather than posix_spawn: the child asks to be killed with the test process (PR_SET_PDEATHSIG), so
  // a test that aborts or times out leaves no node behind (nor ctest waiting on it).
  sim_process& spawn(const std::string& name, const std::vector<std::string>& args) {
    sim_process p;
    p.name = name;
    p.log = dir_ / (name + ".log");
    const std::string program = actorllm_binary().string();
    std::vector<std::string> argv_storage{program};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log_fd = ::open(p.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
      throw std::runtime_error("cannot create " + p.log.string());
    const pid_t parent = ::getpid();
    p.pid = ::fork();
    if (p.pid == 0) {
      // Only async-signal-safe calls until exec.
      die_with_parent(parent);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
      ::execve(program.c_str(), argv.data(), environ);
      ::_exit(127);
    }
    ::close(log_fd);
    if (p.pid < 0)
      throw std::runtime_error("cannot fork to start " + program);
    processes_.push_back(std::move(p));
    return processes_.back();
  }

  options options_;
  std::filesystem::path dir_;
  std::string head_address_;
  uint16_t head_port_ = 0;
  std::deque<sim_process> processes_;  // the head first; a deque keeps references valid
};

}  // namespace actorllm::test
