// Subcommands of the `actorllm` binary register themselves here, one file per command (apps/cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace actorllm::app {

/// Adds a command's options to its CLI11 subcommand and returns the function that runs it (its exit status).
using command_setup = std::function<std::function<int()>(CLI::App& sub)>;

struct command_entry {
  std::string name;
  std::string description;
  command_setup setup;
};

/// All registered commands, in registration order.
std::vector<command_entry>& command_registry();

/// Registers a command at static-initialisation time: `static command_registration reg{"generate", "...", f};`.
struct command_registration {
  command_registration(std::string name, std::string description, command_setup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace actorllm::app
