// The actorllm binary: dispatches to the subcommands registered in apps/cmd_*.cpp.
#include "apps/command_registry.hpp"
#include "apps/nearest_name.hpp"

#include <actorllm/version.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

/// `actorllm --config FILE [flags]` means `actorllm serve --config FILE [flags]`: a settings file describes a
/// server. Applies when the first argument is a flag (not a command) and --config is among the arguments.
void insert_serve_for_config(std::vector<std::string>& args) {
  if (args.empty() || args.front().empty() || args.front().front() != '-')
    return;
  for (const auto& a : args)
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      args.insert(args.begin(), "serve");
      return;
    }
}

/// A flag the command does not know, and the nearest one it does.
struct unknown_flag {
  CLI::App* command = nullptr;
  std::string flag;
  std::optional<std::string> suggestion;
};

/// After CLI11 rejected the arguments: the subcommand named in `args` and its first "--flag" that it does not
/// know, with the nearest valid long flag. Nothing when no unknown flag follows a command.
std::optional<unknown_flag> find_unknown_flag(CLI::App& app, const std::vector<std::string>& args) {
  CLI::App* command = nullptr;
  for (const auto& a : args) {
    if (command == nullptr) {
      if (!a.empty() && a.front() != '-') {
        auto named = app.get_subcommands([&a](CLI::App* sub) { return sub->check_name(a); });
        command = named.empty() ? nullptr : named.front();
      }
      if (command == nullptr)
        return std::nullopt;  // a flag or a word before any command: CLI11's own message says it best
      continue;
    }
    if (a == "--")
      break;
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      continue;
    const std::string flag = a.substr(0, a.find('='));
    if (command->get_option_no_throw(flag) != nullptr)
      continue;
    std::vector<std::string> names;
    for (const CLI::Option* opt : command->get_options())
      for (const auto& name : opt->get_lnames())
        names.push_back("--" + name);
    return unknown_flag{command, flag, actorllm::app::nearest_name(flag, names)};
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace actorllm::app;
  CLI::App app{"actorllm: serve Hugging Face causal LMs on one device, many devices, or many nodes"};
  app.set_version_flag("--version", std::string{actorllm::version_string});
  app.require_subcommand(1);
  app.footer("`actorllm --config FILE [flags]` is short for `actorllm serve --config FILE [flags]`.\n");
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& entry : command_registry()) {
    auto* sub = app.add_subcommand(entry.name, entry.description);
    runners[sub] = entry.setup(*sub);
  }
  // "-tp 2" / "-tp=2" -> "--tensor-parallel-size 2" / "--tensor-parallel-size=2" (see option_aliases()).
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    for (const auto& [alias, long_name] : option_aliases())
      if (arg == alias || arg.rfind(alias + "=", 0) == 0)
        arg = long_name + arg.substr(alias.size());
    args.push_back(std::move(arg));
  }
  insert_serve_for_config(args);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them in reverse order
  } catch (const CLI::ParseError& e) {
    // An unknown flag is reported as such even when CLI11 stopped at something else first (a required option
    // the user meant to give with the misspelt flag): it is the likelier mistake. --help and --version exit 0.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    if (auto unknown = find_unknown_flag(app, args)) {
      std::fprintf(stderr, "actorllm %s: error: unknown flag %s", unknown->command->get_name().c_str(),
                   unknown->flag.c_str());
      if (unknown->suggestion)
        std::fprintf(stderr, "; did you mean %s?\n", unknown->suggestion->c_str());
      else
        std::fprintf(stderr, " (see actorllm %s --help)\n", unknown->command->get_name().c_str());
      return 2;
    }
    return app.exit(e);
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "actorllm %s: error: %s\n", sub->get_name().c_str(), e.what());
        return 1;
      }
    }
  }
  return 2;
}
