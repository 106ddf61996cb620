// Reading Hugging Face safetensors checkpoints: one file mapped (privately) with its header validated up front, and a
// checkpoint directory (one file, or an index and its shards) seen as one name -> tensor table.
#pragma once

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actorllm::model {

/// How a safetensors file stores a tensor's elements: the float types weights are computed in, and the integer and
/// 8-bit float types quantized checkpoints pack their codes, scales and shapes into.
enum class stored_type : uint8_t { f32, f16, bf16, i64, i32, i16, i8, u8, f8_e4m3 };

/// Bytes per element of `t`.
size_t stored_type_size(stored_type t);
/// The safetensors spelling: "F32", "I32", "F8_E4M3", ...
std::string_view stored_type_name(stored_type t);

/// One tensor of a safetensors file.
struct tensor_info {
  std::string name;
  /// The element type when it is a float one (F32, F16, BF16); for the others (`stored` says which) f32, and the
  /// loader refuses them where it expects float weights.
  dtype type = dtype::f32;
  stored_type stored = stored_type::f32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  ///< absolute file offset of the first byte
  uint64_t data_end = 0;    ///< absolute file offset one past the last byte

  /// Number of elements (1 for a 0-d tensor).
  int64_t numel() const;
  /// data_end - data_begin.
  uint64_t nbytes() const { return data_end - data_begin; }
  /// Whether the elements are F32, F16 or BF16 (`type` holds which).
  bool is_float() const {
    return stored == stored_type::f32 || stored == stored_type::f16 || stored == stored_type::bf16;
  }
};

/// A private mapping of a whole file, unmapped when its last holder lets go: the safetensors_file that made it, and
/// every weight the loader uses in place (host_tensor::view keeps it alive). Writes to it (a backend rewriting a
/// weight in place) go to private copies of the pages written; the file never changes.
class file_mapping {
 public:
  /// Takes over the mapping of `size` bytes at `data` (from mmap) of the file `identity` names (its offset 0).
  file_mapping(const std::byte* data, uint64_t size, file_origin identity = {})
      : data_(data), size_(size), identity_(identity) {}
  ~file_mapping();
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;

  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  /// The file and offset of `p`, which must point into the mapping.
  file_origin origin_of(const void* p) const {
    file_origin o = identity_;
    o.offset = static_cast<uint64_t>(static_cast<const std::byte*>(p) - data_);
    return o;
  }
  /// Whether `p` points into the mapping.
  bool contains(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= data_ && b < data_ + size_;
  }

 private:
  const std::byte* data_;
  uint64_t size_;
  file_origin identity_;
};

/// One .safetensors file, mapped (privately: see file_mapping). Everything the header claims is checked at open, so a
/// tensor_info from it always describes bytes inside the mapping: file at least 8 bytes; header length (u64 LE) at most
/// 100 MB and inside the file; header a JSON object; every entry with dtype F32/F16/BF16, a shape of non-negative ints
/// whose byte size does not overflow, data_offsets [begin, end] with end - begin == numel * dtype size, inside the data
/// section and overlapping no other tensor; "__metadata__" a map of strings. Errors (model_error) name the file and
/// the tensor.
class safetensors_file {
 public:
  /// Opens, maps and validates `path`.
  static safetensors_file open(const std::filesystem::path& path);

  safetensors_file(safetensors_file&& other) noexcept;
  safetensors_file& operator=(safetensors_file&& other) noexcept;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;
  ~safetensors_file();

  /// The path it was opened with.
  const std::filesystem::path& path() const { return path_; }
  /// Every tensor, in header order.
  const std::vector<tensor_info>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const tensor_info* find(std::string_view name) const;
  /// The first byte of `info`'s data inside the mapping; `info` must come from this file. No alignment is promised
  /// (safetensors does not require any): read through memcpy.
  const std::byte* data(const tensor_info& info) const { return map_ + info.data_begin; }
  /// "__metadata__", when the header has one.
  const std::unordered_map<std::string, std::string>& metadata() const { return metadata_; }
  /// Size of the file in bytes.
  uint64_t file_size() const { return size_; }
  /// The mapping, for a tensor used in place to keep alive (null once moved from).
  const std::shared_ptr<const file_mapping>& mapping() const { return mapping_; }

 private:
  safetensors_file() = default;
  void unmap() noexcept;

  std::filesystem::path path_;
  std::shared_ptr<const file_mapping> mapping_;
  const std::byte* map_ = nullptr;  // mapping_->data()
  uint64_t size_ = 0;
  std::vector<tensor_info> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;  // views into tensors_[i].name
  std::unordered_map<std::string, std::string> metadata_;
};

/// A checkpoint directory as Hugging Face writes it: model.safetensors, or model.safetensors.index.json and the shards
/// its weight_map names. At open, every shard is opened and validated, every tensor the index lists must be in the
/// shard it names, and no tensor name may appear in two shards.
class safetensors_checkpoint {
 public:
  /// Opens `dir` (or, as a convenience, a single .safetensors file). Throws model_error when neither
  /// model.safetensors nor model.safetensors.index.json is there, or anything above fails.
  static safetensors_checkpoint open(const std::filesystem::path& dir);

  /// Where a tensor lives: its file and its header entry; both live as long as the checkpoint.
  struct entry {
    const safetensors_file* file;
    const tensor_info* info;
  };

  /// The tensor called `name`, or nullopt.
  std::optional<entry> find(std::string_view name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// The opened files (one, or the shards in index order).
  const std::vector<std::unique_ptr<safetensors_file>>& files() const { return files_; }
  /// The directory (or file) it was opened from.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::vector<std::unique_ptr<safetensors_file>> files_;  // heap-held so entries survive moves of the checkpoint
  std::unordered_map<std::string_view, entry> by_name_;   // views into the files' tensor names
};

}  // namespace actorllm::model
