// Reads `actorllm serve` settings from TOML (see serve_config_file.hpp for the sections and keys).
#include "apps/serve_config_file.hpp"

#include "apps/cluster_tls_options.hpp"
#include "apps/engine_flags.hpp"
#include "apps/eplb_config_text.hpp"
#include "apps/nearest_name.hpp"
#include "hub/repo_id.hpp"
#include "kernels/device.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "text/structured/structured_limits.hpp"

#include <fmt/format.h>
#include <simdjson.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace actorllm::app {
namespace {

namespace fs = std::filesystem;

/// Where a value sits, for messages: "'port' in [server] (cluster.toml:7)".
struct key_location {
  std::string_view section;
  std::string_view key;
  std::string file;
  std::size_t line = 0;

  std::string describe() const { return fmt::format("'{}' in [{}] ({}:{})", key, section, file, line); }
};

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    default:
      return "nothing";
  }
}

[[noreturn]] void type_error(const key_location& at, const toml::node& n, std::string_view expected) {
  throw config_file_error(fmt::format("{} must be {}, got {}", at.describe(), expected, type_name(n)));
}

using setter = std::function<void(const toml::node&, const key_location&)>;

struct key_spec {
  std::string name;
  setter set;
};

struct section_spec {
  std::string name;
  std::vector<key_spec> keys;
};

setter string_value(std::string& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (!n.is_string())
      type_error(at, n, "a string");
    out = n.as_string()->get();
  };
}

/// One of a fixed set of strings (the values the matching flag accepts).
setter choice_value(std::string& out, std::vector<std::string> choices) {
  return [&out, choices = std::move(choices)](const toml::node& n, const key_location& at) {
    const std::string expected = fmt::format("one of \"{}\"", fmt::join(choices, "\", \""));
    if (!n.is_string())
      type_error(at, n, expected);
    const std::string value{n.as_string()->get()};
    if (std::find(choices.begin(), choices.end(), value) == choices.end())
      throw config_file_error(fmt::format("{} must be {}, got \"{}\"", at.describe(), expected, value));
    out = value;
  };
}

/// A device this build runs shards on (kernels/device.hpp decides, as for --device).
setter device_value(std::string& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (!n.is_string())
      type_error(at, n, "a string");
    const std::string value{n.as_string()->get()};
    if (const device_choice chosen = resolve_device(value); !chosen.error.empty())
      throw config_file_error(fmt::format("{}: {}", at.describe(), chosen.error));
    out = value;
  };
}

setter bool_value(bool& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (!n.is_boolean())
      type_error(at, n, "a boolean");
    out = n.as_boolean()->get();
  };
}

/// A string naming a file or directory: relative paths are taken relative to the settings file. `only_if_exists`:
/// the string may also be something else (an inline chat template, "auto"), so it is resolved only when the
/// resolved path exists.
setter path_value(std::string& out, fs::path base_dir, bool only_if_exists = false) {
  return [&out, base_dir = std::move(base_dir), only_if_exists](const toml::node& n, const key_location& at) {
    if (!n.is_string())
      type_error(at, n, "a string");
    out = n.as_string()->get();
    const fs::path p{out};
    if (out.empty() || p.is_absolute() || base_dir.empty())
      return;
    const fs::path resolved = base_dir / p;
    std::error_code ec;
    if (!only_if_exists || fs::exists(resolved, ec))
      out = fs::absolute(resolved, ec).lexically_normal().string();
  };
}

/// A model or tokenizer: a directory (relative paths taken relative to the settings file, as path_value does), or
/// a Hugging Face repo id of the form "org/name" when no such directory exists there, kept as given. A bare name
/// ("gpt2") stays a path next to the file here: in a file, a lone word reads as a folder beside it.
setter model_value(std::string& out, fs::path base_dir) {
  return [&out, base_dir = std::move(base_dir)](const toml::node& n, const key_location& at) {
    path_value(out, base_dir)(n, at);
    const std::string given{n.as_string()->get()};
    std::error_code ec;
    if (out != given && !fs::exists(out, ec) && given.find('/') != std::string::npos && hub::is_repo_id(given))
      out = given;
  };
}

template <class T>
setter integer_value(T& out, int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max()) {
  return [&out, min, max](const toml::node& n, const key_location& at) {
    if (!n.is_integer())
      type_error(at, n, "an integer");
    const int64_t v = n.as_integer()->get();
    if (v < min || v > max) {
      if (max == std::numeric_limits<int64_t>::max())
        throw config_file_error(fmt::format("{} must be >= {}, got {}", at.describe(), min, v));
      throw config_file_error(fmt::format("{} must be in [{}, {}], got {}", at.describe(), min, max, v));
    }
    out = static_cast<T>(v);
  };
}

setter number_value(double& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (n.is_integer())
      out = static_cast<double>(n.as_integer()->get());
    else if (n.is_floating_point())
      out = n.as_floating_point()->get();
    else
      type_error(at, n, "a number");
  };
}

/// A string or an array of strings.
setter string_list_value(std::vector<std::string>& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (n.is_string()) {
      out = {n.as_string()->get()};
      return;
    }
    if (!n.is_array())
      type_error(at, n, "a string or an array of strings");
    std::vector<std::string> values;
    for (const auto& element : *n.as_array()) {
      if (!element.is_string())
        type_error(at, element, "an array of strings, but an element");
      values.push_back(element.as_string()->get());
    }
    out = std::move(values);
  };
}

/// Layers per pipeline stage: "3,2" or [3, 2].
setter partition_value(std::string& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (n.is_string()) {
      out = n.as_string()->get();
      return;
    }
    if (!n.is_array())
      type_error(at, n, "a string like \"3,2\" or an array of integers");
    std::string joined;
    for (const auto& element : *n.as_array()) {
      if (!element.is_integer())
        type_error(at, element, "an array of integers, but an element");
      if (!joined.empty())
        joined += ',';
      joined += std::to_string(element.as_integer()->get());
    }
    out = joined;
  };
}

/// A byte count: a positive integer, or a string with a unit like "4GiB".
setter bytes_value(uint64_t& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (n.is_integer() && n.as_integer()->get() > 0) {
      out = static_cast<uint64_t>(n.as_integer()->get());
      return;
    }
    if (!n.is_string())
      type_error(at, n, "a positive integer or a string like \"4GiB\"");
    if (std::string why = parse_bytes(n.as_string()->get(), out); !why.empty())
      throw config_file_error(fmt::format("{}: {}", at.describe(), why));
  };
}

/// --eplb-config's settings: vLLM's JSON object as a string, or a TOML table of the same keys.
setter eplb_value(eplb_config& out) {
  return [&out](const toml::node& n, const key_location& at) {
    if (n.is_string()) {
      if (std::string why = parse_eplb_config(n.as_string()->get(), out); !why.empty())
        throw config_file_error(fmt::format("{}: {}", at.describe(), why));
      return;
    }
    if (!n.is_table())
      type_error(at, n, "a table of EPLB settings or a JSON object as a string");
    eplb_config next = out;
    for (const auto& [key, value] : *n.as_table()) {
      const bool is_bool = value.is_boolean();
      if (!is_bool && !value.is_integer() && key.str() != "window_size" && key.str() != "step_interval" &&
          key.str() != "num_redundant_experts" && key.str() != "log_balancedness")
        throw config_file_error(
            fmt::format("{}: unknown key '{}' (known: {})", at.describe(), key.str(), eplb_config_keys));
      if (!is_bool && !value.is_integer())
        throw config_file_error(fmt::format("{}: {} must be {}, got {}", at.describe(), key.str(),
                                            key.str() == "log_balancedness" ? "true or false" : "an integer",
                                            type_name(value)));
      const int64_t number = is_bool ? (value.as_boolean()->get() ? 1 : 0) : value.as_integer()->get();
      if (std::string why = set_eplb_key(next, key.str(), is_bool, number); !why.empty())
        throw config_file_error(fmt::format("{}: {}", at.describe(), why));
    }
    out = next;
  };
}

/// The reader of an engine setting's key, by the kind of value the table gives it.
setter engine_setter(const engine_flag& f, engine_config& cfg, const fs::path& base_dir) {
  auto text = [&]() -> std::string& { return cfg.*std::get<std::string engine_config::*>(f.field); };
  switch (f.kind) {
    case value_kind::integer:
      if (auto* m = std::get_if<int32_t engine_config::*>(&f.field))
        return integer_value(cfg.**m, f.min, f.max);
      return integer_value(cfg.*std::get<uint64_t engine_config::*>(f.field), f.min, f.max);
    case value_kind::number:
      return number_value(cfg.*std::get<double engine_config::*>(f.field));
    case value_kind::fraction:
      return [&v = cfg.*std::get<double engine_config::*>(f.field)](const toml::node& n, const key_location& at) {
        number_value(v)(n, at);
        if (!(v > 0 && v <= 1))
          throw config_file_error(fmt::format("{} must be in (0, 1], got {}", at.describe(), v));
      };
    case value_kind::flag:
      return bool_value(cfg.*std::get<bool engine_config::*>(f.field));
    case value_kind::text:
      return string_value(text());
    case value_kind::path:
      return path_value(text(), base_dir);
    case value_kind::choice:
      return choice_value(text(), std::vector<std::string>(f.choices.begin(), f.choices.end()));
    case value_kind::executor:
      return choice_value(text(), {"uni", "mp", "cluster"});
    case value_kind::device:
      return device_value(text());
    case value_kind::kv_dtype:
      return [&out = text()](const toml::node& n, const key_location& at) {
        if (!n.is_string())
          type_error(at, n, "a string");
        const std::string value{n.as_string()->get()};
        std::string why;
        if (!parse_kv_cache_dtype(value, why))
          throw config_file_error(fmt::format("{}: {}", at.describe(), why));
        out = value;
      };
    case value_kind::partition:
      return partition_value(text());
    case value_kind::bytes:
      return bytes_value(cfg.*std::get<uint64_t engine_config::*>(f.field));
    case value_kind::eplb:
      return eplb_value(cfg.*std::get<eplb_config engine_config::*>(f.field));
  }
  return string_value(text());
}

std::vector<section_spec> server_sections(serve_options& o, const fs::path& base_dir);

/// The sections and keys: the server's own, then the engine's from its table (apps/engine_flags.hpp).
std::vector<section_spec> sections_for(serve_options& o, const fs::path& base_dir) {
  std::vector<section_spec> sections = server_sections(o, base_dir);
  for (const engine_flag& f : engine_flags()) {
    auto section = std::find_if(sections.begin(), sections.end(), [&](const auto& s) { return s.name == f.section; });
    if (section == sections.end())
      throw std::logic_error(fmt::format("engine setting {}: no section [{}]", f.key, f.section));
    setter set = engine_setter(f, o.engine, base_dir);
    if (std::holds_alternative<double engine_config::*>(f.field) &&
        std::get<double engine_config::*>(f.field) == &engine_config::gpu_memory_utilization)
      set = [&o, set = std::move(set)](const toml::node& n, const key_location& at) {
        set(n, at);
        o.gpu_memory_utilization_set = true;
      };
    section->keys.push_back({std::string{f.key}, std::move(set)});
  }
  return sections;
}

/// The settings of the server itself, by section (the engine's are added by sections_for).
std::vector<section_spec> server_sections(serve_options& o, const fs::path& base_dir) {
  constexpr int64_t int32_max = std::numeric_limits<int32_t>::max();
  return {
      {"model",
       {
           {"path", model_value(o.model, base_dir)},
           {"tokenizer", model_value(o.tokenizer, base_dir)},
           {"revision", string_value(o.revision)},
           {"tokenizer_revision", string_value(o.tokenizer_revision)},
           {"download_dir", path_value(o.download_dir, base_dir)},
           {"served_model_name", string_list_value(o.served_model_names)},
           {"chat_template", path_value(o.chat_template, base_dir, true)},
           {"generation_config", path_value(o.generation_config, base_dir, true)},
       }},
      {"lora",
       {
           {"lora_modules", string_list_value(o.lora_modules)},
       }},
      {"parallel", {}},
      {"scheduler",
       {
           {"max_queued_requests", integer_value(o.max_queued_requests, -1)},
       }},
      {"cache", {}},
      {"server",
       {
           {"host", string_value(o.host)},
           {"port", integer_value(o.port, 0, 65535)},
           {"api_key", string_value(o.api_key)},
           {"allowed_origins", string_list_value(o.allowed_origins)},
           {"shutdown_timeout", number_value(o.shutdown_timeout)},
           {"max_connections", integer_value(o.max_connections, 1)},
           {"max_body_bytes", integer_value(o.max_body_bytes, 1)},
           {"log_level", choice_value(o.log_level, {"debug", "info", "warning", "error"})},
           {"enable_prompt_tokens_details", bool_value(o.enable_prompt_tokens_details)},
           {"enable_force_include_usage", bool_value(o.enable_force_include_usage)},
           {"disable_log_stats", bool_value(o.disable_log_stats)},
           {"max_logprobs", integer_value(o.max_logprobs, 0, int32_max)},
           {"max_stop_strings", integer_value(o.max_stop_strings, 0)},
           {"max_stop_bytes", integer_value(o.max_stop_bytes, 0)},
           {"max_prompts_per_request", integer_value(o.max_prompts_per_request, 1)},
           {"max_tools", integer_value(o.max_tools, 0)},
           {"max_chat_template_kwargs", integer_value(o.max_chat_template_kwargs, 0)},
           {"max_bad_words", integer_value(o.max_bad_words, 0)},
           {"max_structured_output_bytes", integer_value(o.max_structured_output_bytes, 1, int64_t{1} << 30)},
           {"max_structured_output_depth",
            integer_value(o.max_structured_output_depth, 1,
                          static_cast<int64_t>(text::structured::max_structured_depth_setting))},
           {"max_structured_output_states", integer_value(o.max_structured_output_states, 1, int64_t{1} << 24)},
           {"structured_output_compile_budget", integer_value(o.structured_output_compile_budget, 1)},
           {"root_path", string_value(o.root_path)},
           {"chat_template_content_format", choice_value(o.chat_template_content_format, {"auto", "string", "openai"})},
           {"return_tokens_as_token_ids", bool_value(o.return_tokens_as_token_ids)},
           {"enable_auto_tool_choice", bool_value(o.enable_auto_tool_choice)},
           {"tool_call_parser", choice_value(o.tool_call_parser, {"hermes", "llama3_json", "mistral"})},
           {"reasoning_parser", choice_value(o.reasoning_parser, {"deepseek_r1", "qwen3"})},
       }},
      {"cluster",
       {
           {"host_ip", string_value(o.host_ip)},
           {"max_control_message_bytes",
            integer_value(o.max_control_message_bytes, static_cast<int64_t>(min_control_message_bytes),
                          static_cast<int64_t>(max_control_message_bytes))},
       }},
  };
}

std::string underscored(std::string_view name) {
  std::string s{name};
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::string suggestion(std::string_view name, const std::vector<std::string>& candidates, std::string_view quote_l,
                       std::string_view quote_r) {
  if (auto near = nearest_name(name, candidates))
    return fmt::format("; did you mean {}{}{}?", quote_l, *near, quote_r);
  return {};
}

std::string section_names(const std::vector<section_spec>& sections) {
  std::string out;
  for (const auto& s : sections)
    out += fmt::format("{}[{}]", out.empty() ? "" : ", ", s.name);
  return out;
}

void apply_section(const section_spec& section, const toml::table& table, const std::string& file) {
  std::vector<std::string> names;
  for (const auto& k : section.keys)
    names.push_back(k.name);
  std::set<std::string> seen;
  for (auto&& [raw_key, value] : table) {
    const std::string key = underscored(raw_key.str());
    const std::size_t line = raw_key.source().begin.line;
    auto spec = std::find_if(section.keys.begin(), section.keys.end(), [&](const auto& k) { return k.name == key; });
    if (spec == section.keys.end())
      throw config_file_error(fmt::format("unknown key '{}' in [{}] ({}:{}){}", raw_key.str(), section.name, file, line,
                                          suggestion(key, names, "'", "'")));
    if (!seen.insert(key).second)
      throw config_file_error(fmt::format("'{}' in [{}] ({}:{}) is set twice (dashes and underscores are the same)",
                                          raw_key.str(), section.name, file, line));
    spec->set(value, key_location{section.name, raw_key.str(), file, line});
  }
}

serve_options apply(const toml::table& root, const fs::path& source, serve_options base) {
  const std::string file = source.string();
  const auto sections = sections_for(base, source.parent_path());
  std::vector<std::string> names;
  for (const auto& s : sections)
    names.push_back(s.name);
  for (auto&& [raw_key, value] : root) {
    const std::string name = underscored(raw_key.str());
    const std::size_t line = raw_key.source().begin.line;
    auto section = std::find_if(sections.begin(), sections.end(), [&](const auto& s) { return s.name == name; });
    if (section == sections.end()) {
      // A key written above every section header: say which section it belongs in.
      for (const auto& s : sections)
        for (const auto& k : s.keys)
          if (k.name == name)
            throw config_file_error(fmt::format("'{}' ({}:{}) must be inside a section: put it under [{}]",
                                                raw_key.str(), file, line, s.name));
      throw config_file_error(fmt::format("unknown section [{}] ({}:{}){} (sections: {})", raw_key.str(), file, line,
                                          suggestion(name, names, "[", "]"), section_names(sections)));
    }
    if (!value.is_table())
      throw config_file_error(
          fmt::format("[{}] ({}:{}) must be a table of settings, got {}", raw_key.str(), file, line, type_name(value)));
    apply_section(*section, *value.as_table(), file);
  }
  base.config_file = file;
  return base;
}

}  // namespace

serve_options parse_serve_config(std::string_view toml_text, const std::filesystem::path& source, serve_options base) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source.string());
  } catch (const toml::parse_error& e) {
    throw config_file_error(
        fmt::format("{}:{}:{}: {}", source.string(), e.source().begin.line, e.source().begin.column, e.description()));
  }
  return apply(root, source, std::move(base));
}

serve_options read_serve_config_file(const std::filesystem::path& file, serve_options base) {
  std::ifstream in{file, std::ios::binary};
  if (!in)
    throw config_file_error(fmt::format("cannot read the config file {}", file.string()));
  std::stringstream text;
  text << in.rdbuf();
  return parse_serve_config(text.str(), file, std::move(base));
}

std::vector<std::string> serve_config_keys() {
  serve_options scratch;
  std::vector<std::string> out;
  for (const auto& s : sections_for(scratch, {}))
    for (const auto& k : s.keys)
      out.push_back(s.name + "." + k.name);
  return out;
}

std::vector<std::string> parse_allowed_origins(const std::vector<std::string>& entries) {
  auto trim = [](std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos)
      return std::string{};
    return std::string{s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1)};
  };
  std::vector<std::string> out;
  for (const auto& entry : entries) {
    const std::string text = trim(entry);
    if (!text.empty() && text.front() == '[') {
      simdjson::dom::parser parser;
      simdjson::dom::array list;
      if (parser.parse(simdjson::padded_string{text}).get_array().get(list) != simdjson::SUCCESS)
        throw std::invalid_argument(
            fmt::format("--allowed-origins: '{}' is not a JSON list of strings like '[\"*\"]'", text));
      for (auto element : list) {
        std::string_view origin;
        if (element.get_string().get(origin) != simdjson::SUCCESS)
          throw std::invalid_argument(fmt::format("--allowed-origins: '{}' holds something other than a string", text));
        out.emplace_back(origin);
      }
      continue;
    }
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t comma = text.find(',', start);
      if (comma == std::string::npos)
        comma = text.size();
      if (auto origin = trim(std::string_view{text}.substr(start, comma - start)); !origin.empty())
        out.push_back(std::move(origin));
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace actorllm::app
