// Subcommands of the `actorllm` binary register themselves here, one file per command (apps/cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
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

/// Single-dash multi-letter spellings of long options, as vLLM's argparse accepts them ("-tp" for
/// "--tensor-parallel-size"). CLI11 only knows one-letter short options, so main() rewrites these before parsing.
std::map<std::string, std::string>& option_aliases();

/// Registers an alias at static-initialisation time: `static option_alias tp{"-tp", "--tensor-parallel-size"};`.
struct option_alias {
  option_alias(std::string alias, std::string long_name) {
    option_aliases().insert_or_assign(std::move(alias), std::move(long_name));
  }
};

}  // namespace actorllm::app
