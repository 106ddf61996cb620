#include "bench/export/gguf_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace actorllm::bench {

namespace {

// GGUF is little-endian; so is every machine this builds for, so values are written as their bytes.
template <typename T>
void put(std::string& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

size_t ggml_type_size(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
      return 4;
    case ggml_type::f16:
    case ggml_type::bf16:
      return 2;
  }
  throw std::invalid_argument("unknown ggml_type");
}

gguf_writer::gguf_writer(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument(fmt::format("GGUF alignment must be a power of two, got {}", alignment));
  add_u32("general.alignment", alignment);
}

void gguf_writer::add_key(std::string key, gguf_value_type type, std::string encoded_value) {
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end())
    throw std::invalid_argument(fmt::format("GGUF key '{}' added twice", key));
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, static_cast<uint32_t>(type));
  kv_bytes_ += encoded_value;
  keys_.push_back(std::move(key));
}

void gguf_writer::add_u32(std::string key, uint32_t value) {
  std::string v;
  put(v, value);
  add_key(std::move(key), gguf_value_type::u32, std::move(v));
}

void gguf_writer::add_f32(std::string key, float value) {
  std::string v;
  put(v, value);
  add_key(std::move(key), gguf_value_type::f32, std::move(v));
}

void gguf_writer::add_bool(std::string key, bool value) {
  std::string v;
  put<uint8_t>(v, value ? 1 : 0);
  add_key(std::move(key), gguf_value_type::boolean, std::move(v));
}

void gguf_writer::add_string(std::string key, std::string value) {
  std::string v;
  put_string(v, value);
  add_key(std::move(key), gguf_value_type::string, std::move(v));
}

void gguf_writer::add_string_array(std::string key, const std::vector<std::string>& values) {
  std::string v;
  put<uint32_t>(v, static_cast<uint32_t>(gguf_value_type::string));
  put<uint64_t>(v, values.size());
  for (const std::string& s : values)
    put_string(v, s);
  add_key(std::move(key), gguf_value_type::array, std::move(v));
}

void gguf_writer::add_f32_array(std::string key, const std::vector<float>& values) {
  std::string v;
  put<uint32_t>(v, static_cast<uint32_t>(gguf_value_type::f32));
  put<uint64_t>(v, values.size());
  for (float x : values)
    put(v, x);
  add_key(std::move(key), gguf_value_type::array, std::move(v));
}

void gguf_writer::add_i32_array(std::string key, const std::vector<int32_t>& values) {
  std::string v;
  put<uint32_t>(v, static_cast<uint32_t>(gguf_value_type::i32));
  put<uint64_t>(v, values.size());
  for (int32_t x : values)
    put(v, x);
  add_key(std::move(key), gguf_value_type::array, std::move(v));
}

void gguf_writer::add_tensor(std::string name, ggml_type type, std::vector<int64_t> ne, tensor_source source) {
  if (std::any_of(tensors_.begin(), tensors_.end(), [&](const tensor_entry& t) { return t.name == name; }))
    throw std::invalid_argument(fmt::format("GGUF tensor '{}' added twice", name));
  if (ne.empty() || ne.size() > 4)
    throw std::invalid_argument(fmt::format("GGUF tensor '{}': {} dimensions (ggml has 1 to 4)", name, ne.size()));
  uint64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0)
      throw std::invalid_argument(fmt::format("GGUF tensor '{}': dimension {} is not positive", name, d));
    n *= static_cast<uint64_t>(d);
  }
  const uint64_t nbytes = n * ggml_type_size(type);
  const uint64_t offset = align_up(data_bytes_, alignment_);
  data_bytes_ = offset + nbytes;
  tensors_.push_back({std::move(name), type, std::move(ne), nbytes, offset, std::move(source)});
}

void gguf_writer::write(const std::filesystem::path& path) const {
  std::string header;
  header.append("GGUF");
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, keys_.size());
  header += kv_bytes_;
  for (const tensor_entry& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne)
      put<uint64_t>(header, static_cast<uint64_t>(d));
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, t.offset);
  }
  header.append(align_up(header.size(), alignment_) - header.size(), '\0');

  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  if (!out)
    throw std::runtime_error(fmt::format("{}: cannot be created", path.string()));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const auto data_start = static_cast<uint64_t>(out.tellp());
  const std::string padding(alignment_, '\0');
  for (const tensor_entry& t : tensors_) {
    const uint64_t at = static_cast<uint64_t>(out.tellp()) - data_start;
    out.write(padding.data(), static_cast<std::streamsize>(t.offset - at));
    t.source(out);
    const uint64_t written = static_cast<uint64_t>(out.tellp()) - data_start - t.offset;
    if (!out)
      throw std::runtime_error(fmt::format("{}: writing tensor '{}' failed", path.string(), t.name));
    if (written != t.nbytes)
      throw std::runtime_error(
          fmt::format("{}: tensor '{}' wrote {} bytes, declared {}", path.string(), t.name, written, t.nbytes));
  }
  out.flush();
  if (!out)
    throw std::runtime_error(fmt::format("{}: writing failed", path.string()));
}

}  // namespace actorllm::bench
