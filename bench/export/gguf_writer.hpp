// A GGUF v3 file writer (ggml's model format, as llama.cpp reads it): metadata key/values, tensor infos, and the
// tensor data, each tensor at an offset aligned to general.alignment. Tensor bytes are produced at write time by a
// callback, so a multi-gigabyte checkpoint streams from its mapping to the file without a copy in memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace actorllm::bench {

/// The ggml element types the writer emits (ggml.h's numbering).
enum class ggml_type : uint32_t { f32 = 0, f16 = 1, bf16 = 30 };

/// Bytes per element of `t`.
size_t ggml_type_size(ggml_type t);

/// GGUF metadata value types (gguf.h's numbering).
enum class gguf_value_type : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12
};

/// Collects a GGUF file's metadata and tensors, then writes it in one pass.
class gguf_writer {
 public:
  /// The alignment written as general.alignment (GGUF's default is 32).
  explicit gguf_writer(uint32_t alignment = 32);

  void add_u32(std::string key, uint32_t value);
  void add_f32(std::string key, float value);
  void add_bool(std::string key, bool value);
  void add_string(std::string key, std::string value);
  void add_string_array(std::string key, const std::vector<std::string>& values);
  void add_f32_array(std::string key, const std::vector<float>& values);
  void add_i32_array(std::string key, const std::vector<int32_t>& values);

  /// Writes a tensor's bytes to the stream, exactly its declared size.
  using tensor_source = std::function<void(std::ostream&)>;

  /// A tensor of `ne` elements per dimension in ggml's order (ne[0] the contiguous one: a Hugging Face [rows, cols]
  /// matrix is {cols, rows}); `source` writes its ne-product × type-size bytes when write() runs.
  void add_tensor(std::string name, ggml_type type, std::vector<int64_t> ne, tensor_source source);

  /// Writes the file (std::runtime_error naming `path` when it cannot, or when a source wrote the wrong byte count;
  /// invalid_argument at add time for a duplicate key or tensor name).
  void write(const std::filesystem::path& path) const;

  uint32_t alignment() const { return alignment_; }

 private:
  struct tensor_entry {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    uint64_t offset;  // from the start of the data section
    tensor_source source;
  };
  void add_key(std::string key, gguf_value_type type, std::string encoded_value);

  uint32_t alignment_;
  std::vector<std::string> keys_;
  std::string kv_bytes_;  // the encoded key/value pairs, in insertion order
  std::vector<tensor_entry> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace actorllm::bench
