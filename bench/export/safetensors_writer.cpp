#include "bench/export/safetensors_writer.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace actorllm::bench {

namespace {

std::string_view safetensors_dtype(dtype t, const std::string& name) {
  switch (t) {
    case dtype::f32:
      return "F32";
    case dtype::f16:
      return "F16";
    case dtype::bf16:
      return "BF16";
    case dtype::fp8_e4m3:
      return "F8_E4M3";
    case dtype::i32:
      return "I32";
    case dtype::i64:
      return "I64";
  }
  throw std::runtime_error(fmt::format("tensor '{}': unknown dtype", name));
}

}  // namespace

void write_safetensors(const std::filesystem::path& file, const model::model_weights& weights) {
  if (!weights.quantized().empty())
    throw std::runtime_error(fmt::format("{}: tensor '{}' is quantized; only float weights are written", file.string(),
                                         weights.quantized().begin()->first));
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& [name, t] : weights.tensors()) {
    header += fmt::format("\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}},", name,
                          safetensors_dtype(t.type, name), fmt::join(t.shape, ","), offset, offset + t.nbytes());
    offset += t.nbytes();
  }
  header += "\"__metadata__\":{\"format\":\"pt\"}}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer pads

  std::ofstream out{file, std::ios::binary | std::ios::trunc};
  if (!out)
    throw std::runtime_error(fmt::format("{}: cannot be created", file.string()));
  const uint64_t header_len = header.size();
  char len_bytes[8];
  std::memcpy(len_bytes, &header_len, 8);  // little-endian u64
  out.write(len_bytes, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : weights.tensors()) {
    out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
    if (!out)
      throw std::runtime_error(fmt::format("{}: writing tensor '{}' failed", file.string(), name));
  }
  out.flush();
  if (!out)
    throw std::runtime_error(fmt::format("{}: writing failed", file.string()));
}

void write_checkpoint_dir(const std::filesystem::path& dir, const std::filesystem::path& config_dir,
                          const model::model_weights& weights) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("{}: cannot be created: {}", dir.string(), ec.message()));
  std::filesystem::copy_file(config_dir / "config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec)
    throw std::runtime_error(fmt::format("{}: cannot be copied to {}: {}", (config_dir / "config.json").string(),
                                         dir.string(), ec.message()));
  // generation_config.json's eos_token_id takes precedence over config.json's: it goes along where there is one.
  if (std::filesystem::exists(config_dir / "generation_config.json"))
    std::filesystem::copy_file(config_dir / "generation_config.json", dir / "generation_config.json",
                               std::filesystem::copy_options::overwrite_existing);
  write_safetensors(dir / "model.safetensors", weights);
}

}  // namespace actorllm::bench
