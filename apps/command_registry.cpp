// The registries of command_registry.hpp (in a file of their own: the engine flags' table registers aliases, and the
// tests link it without main()).
#include "apps/command_registry.hpp"

namespace actorllm::app {

std::vector<command_entry>& command_registry() {
  static std::vector<command_entry> registry;
  return registry;
}

std::map<std::string, std::string>& option_aliases() {
  static std::map<std::string, std::string> aliases;
  return aliases;
}

}  // namespace actorllm::app
