// The engine's settings (engine_config) as `actorllm generate` and `actorllm serve` take them on the command line and
// as `--config` files take them in TOML: one table. Each row names the flag (and its vLLM-style single-dash alias),
// the file's section and key, the engine_config field both set, how a value is checked, and the help text; the
// command line (add_engine_flags) and the file reader (apps/serve_config_file.cpp) both read their settings into that
// field from this table, so that no setting is mapped to the engine by hand twice.
#pragma once

#include "actorllm/engine_config.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace actorllm::app {

// kv_cache_memory (size_t) and seed (uint64_t) share the table's unsigned alternative.
static_assert(std::is_same_v<std::size_t, uint64_t>, "engine_field assumes size_t is uint64_t");

/// The engine_config field a setting sets.
using engine_field = std::variant<int32_t engine_config::*, uint64_t engine_config::*, double engine_config::*,
                                  bool engine_config::*, std::string engine_config::*, eplb_config engine_config::*>;

/// How a setting's values are read and checked.
enum class value_kind {
  integer,    ///< an integer field in [min, max]
  number,     ///< a double field
  fraction,   ///< a double field in (0, 1]
  flag,       ///< a bool field: a flag without a value on the command line
  text,       ///< a string field, any value
  path,       ///< a string naming a file: a --config file's relative path is taken relative to the file
  choice,     ///< a string field, one of `choices`
  executor,   ///< uni, mp or cluster; empty: chosen by the world size (the command checks a given spelling)
  device,     ///< a device this build runs shards on (kernels/device.hpp)
  kv_dtype,   ///< --kv-cache-dtype: a KV cache element type by vLLM's names (kernels/kv_cache_dtype.hpp)
  partition,  ///< layers per pipeline stage, "3,2" (a --config file may write [3, 2])
  bytes,      ///< a byte count with an optional unit ("4GiB", "512MiB", "1048576")
  eplb,       ///< --eplb-config: a JSON object of vLLM's EPLBConfig keys (a --config file may write a TOML table)
};

/// One engine setting.
struct engine_flag {
  std::string_view names = {};  ///< CLI11's names ("--quantization,-q"); empty: added by a helper other commands share
  std::string_view alias = {};  ///< vLLM's single-dash spelling ("-tp"), or empty
  std::string_view section = {};  ///< its --config file section
  std::string_view key = {};      ///< its key there (underscores)
  engine_field field = {};
  value_kind kind = value_kind::text;
  std::string_view help = {};
  bool serve_only = false;    ///< `actorllm generate` (one prompt, one engine, no queue) does not take it
  bool show_default = false;  ///< --help shows the default
  int64_t min = 0;            ///< integer: the range
  int64_t max = 0;
  std::span<const std::string_view> choices = {};  ///< choice: the values it takes

  /// The flag's long name for messages ("--quantization").
  std::string_view flag_name() const;
};

/// Every engine setting, in help order.
std::span<const engine_flag> engine_flags();

/// The commands that take engine flags.
enum class engine_command { generate, serve };

/// What add_engine_flags bound outside engine_config: values CLI11 cannot convert as given (a byte count with a
/// unit), converted by check_engine_flags. Must outlive the parse.
struct engine_flag_texts {
  std::map<std::string_view, std::string> bytes;  ///< by flag name, as given
  std::map<std::string_view, std::string> json;   ///< by flag name, as given (value_kind::eplb)
};

/// Adds the engine flags `command` takes to `sub`, each bound to its field of `cfg` (which must outlive the parse),
/// and registers their single-dash aliases.
std::shared_ptr<engine_flag_texts> add_engine_flags(CLI::App& sub, engine_config& cfg, engine_command command);

/// After the parse (and a --config file): converts `given`'s texts into `cfg` and checks the settings `command` takes
/// (the data-parallel ones together, then each range, choice and device). Throws std::invalid_argument naming the
/// flag and the value.
void check_engine_flags(engine_config& cfg, const engine_flag_texts& given, engine_command command);

/// Checks the data-parallel settings together (serve and generate): --data-parallel-size at least 1,
/// --data-parallel-size-local in [0, size], --data-parallel-rank in [0, size) when given (-1: not given). Throws
/// std::invalid_argument naming the flag and the numbers.
void validate_data_parallel(int size, int size_local, int rank);

/// Bytes from "123", "4GiB", "512MiB", "1KiB" (also GB/MB/KB and G/M/K as powers of 1024, the way vLLM's flag reads
/// them) into `out`; returns why not ("'x' is not a byte count like 4GiB"), or "" when it is one.
std::string parse_bytes(std::string_view text, uint64_t& out);

}  // namespace actorllm::app
