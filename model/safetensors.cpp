// safetensors reading. The header is untrusted input: every size and offset is checked (with overflow-safe
// arithmetic) before anything is handed out, so later code can copy from the mapping without re-checking.
#include "model/safetensors.hpp"

#include "model/json_util.hpp"
#include "model/model_error.hpp"
#include "model/text_file.hpp"
#include "util/file_descriptor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

namespace actorllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// Real headers are a few hundred KB even for 400-tensor-per-shard checkpoints; anything near this is corruption.
constexpr uint64_t max_header_bytes = 100ull * 1000 * 1000;

constexpr std::array<std::pair<std::string_view, stored_type>, 9> stored_type_names{{
    {"F32", stored_type::f32},
    {"F16", stored_type::f16},
    {"BF16", stored_type::bf16},
    {"I64", stored_type::i64},
    {"I32", stored_type::i32},
    {"I16", stored_type::i16},
    {"I8", stored_type::i8},
    {"U8", stored_type::u8},
    {"F8_E4M3", stored_type::f8_e4m3},
}};

std::optional<stored_type> parse_stored_type(std::string_view s) {
  for (const auto& [name, t] : stored_type_names)
    if (name == s)
      return t;
  return std::nullopt;
}

/// Reads one header entry, checking it against the data section it must live in.
class header_reader {
 public:
  header_reader(const std::filesystem::path& path, uint64_t data_offset, uint64_t data_size)
      : path_(path.string()), data_offset_(data_offset), data_size_(data_size) {}

  [[noreturn]] void fail(std::string_view name, std::string_view what) const {
    throw model_error(fmt::format("{}: tensor '{}' {}", path_, name, what));
  }

  tensor_info read_tensor(std::string_view name, element entry) const {
    if (entry.type() != element_type::OBJECT)
      fail(name, fmt::format("must be described by an object, got {}", json::type_name(entry)));
    auto obj = json::as_object(entry);
    tensor_info info;
    info.name = std::string(name);

    element dtype_el;
    if (obj.at_key("dtype").get(dtype_el) != simdjson::SUCCESS)
      fail(name, "has no dtype");
    if (dtype_el.type() != element_type::STRING)
      fail(name, fmt::format("has a dtype that is {}, not a string", json::type_name(dtype_el)));
    std::string_view dtype_text = dtype_el.get_string().value_unsafe();
    auto type = parse_stored_type(dtype_text);
    if (!type)
      fail(name, fmt::format("has dtype {}, which actorllm does not support (F32, F16, BF16; I64, I32, I16, I8, U8 "
                             "and F8_E4M3 in quantized checkpoints)",
                             dtype_text));
    info.stored = *type;
    info.type = info.stored == stored_type::f16    ? dtype::f16
                : info.stored == stored_type::bf16 ? dtype::bf16
                                                   : dtype::f32;

    element shape_el;
    if (obj.at_key("shape").get(shape_el) != simdjson::SUCCESS)
      fail(name, "has no shape");
    if (shape_el.type() != element_type::ARRAY)
      fail(name, fmt::format("has a shape that is {}, not a list of integers", json::type_name(shape_el)));
    for (element dim : json::as_array(shape_el)) {
      if (dim.type() == element_type::UINT64)
        fail(name, fmt::format("has a shape dimension too large ({})", dim.get_uint64().value_unsafe()));
      if (dim.type() != element_type::INT64)
        fail(name, fmt::format("has a shape dimension that is {}, not an integer", json::type_name(dim)));
      int64_t d = dim.get_int64().value_unsafe();
      if (d < 0)
        fail(name, fmt::format("has a negative shape dimension ({})", d));
      info.shape.push_back(d);
    }
    // Checked arithmetic: a crafted shape must not wrap around to a small size that passes the offset check.
    const bool empty = std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end();
    uint64_t numel = empty ? 0 : 1;
    bool overflow = false;
    for (int64_t d : info.shape)
      overflow |= !empty && __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    uint64_t nbytes = 0;
    if (!overflow && numel != 0)
      overflow = numel > static_cast<uint64_t>(INT64_MAX) ||
                 __builtin_mul_overflow(numel, stored_type_size(info.stored), &nbytes);
    if (overflow)
      fail(name, fmt::format("has shape [{}] whose byte size overflows 64 bits", fmt::join(info.shape, ", ")));

    element offsets_el;
    if (obj.at_key("data_offsets").get(offsets_el) != simdjson::SUCCESS)
      fail(name, "has no data_offsets");
    if (offsets_el.type() != element_type::ARRAY || json::as_array(offsets_el).size() != 2)
      fail(name, "has data_offsets that are not a list [begin, end]");
    uint64_t offsets[2] = {0, 0};
    int i = 0;
    for (element off : json::as_array(offsets_el)) {
      if (off.type() == element_type::INT64 && off.get_int64().value_unsafe() >= 0)
        offsets[i] = static_cast<uint64_t>(off.get_int64().value_unsafe());
      else if (off.type() == element_type::UINT64)
        offsets[i] = off.get_uint64().value_unsafe();
      else
        fail(name, "has data_offsets that are not non-negative integers");
      ++i;
    }
    auto [begin, end] = offsets;
    if (end < begin)
      fail(name, fmt::format("has data_offsets [{}, {}] that end before they begin", begin, end));
    if (end > data_size_)
      fail(name, fmt::format("has data_offsets [{}, {}] past the end of the data section ({} bytes; file cut short?)",
                             begin, end, data_size_));
    if (end - begin != nbytes)
      fail(name, fmt::format("has data_offsets [{}, {}] holding {} bytes, but shape [{}] of {} needs {} bytes", begin,
                             end, end - begin, fmt::join(info.shape, ", "), dtype_text, nbytes));
    info.data_begin = data_offset_ + begin;
    info.data_end = data_offset_ + end;
    return info;
  }

 private:
  std::string path_;
  uint64_t data_offset_;
  uint64_t data_size_;
};

}  // namespace

size_t stored_type_size(stored_type t) {
  switch (t) {
    case stored_type::f32:
    case stored_type::i32:
      return 4;
    case stored_type::f16:
    case stored_type::bf16:
    case stored_type::i16:
      return 2;
    case stored_type::i64:
      return 8;
    case stored_type::i8:
    case stored_type::u8:
    case stored_type::f8_e4m3:
      return 1;
  }
  return 0;
}

std::string_view stored_type_name(stored_type t) {
  for (const auto& [name, s] : stored_type_names)
    if (s == t)
      return name;
  return "?";
}

int64_t tensor_info::numel() const {
  // Cannot overflow: checked when the header was read (a shape with a zero may have huge other dimensions).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

safetensors_file safetensors_file::open(const std::filesystem::path& path) {
  const std::string where = path.string();
  util::file_descriptor fd(::open(where.c_str(), O_RDONLY | O_CLOEXEC));  // open only while mapping
  if (fd.get() < 0)
    throw model_error(fmt::format("{}: cannot open: {}", where, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw model_error(fmt::format("{}: cannot stat: {}", where, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw model_error(fmt::format("{}: not a regular file", where));
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    throw model_error(fmt::format(
        "{}: file is {} bytes, too short for a safetensors file (the header length alone is 8)", where, size));

  safetensors_file file;  // owns the mapping from here on, so every throw below unmaps
  file.path_ = path;
  // Private and writable: weights are used in place, and a backend that rewrites one (the expert balancer moving
  // experts between slots) gets private copies of the pages it writes; the file never changes. No swap reserved for
  // that: it is the exception, and the pages are the file's until written.
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd.get(), 0);
  if (map == MAP_FAILED)
    throw model_error(fmt::format("{}: cannot mmap {} bytes: {}", where, size, std::strerror(errno)));
  file.mapping_ = std::make_shared<const file_mapping>(static_cast<const std::byte*>(map), size,
                                                       file_origin_of(st, std::filesystem::absolute(path).string()));
  file.map_ = static_cast<const std::byte*>(map);
  file.size_ = size;

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)  // little-endian, whatever the host
    header_len = (header_len << 8) | static_cast<uint64_t>(file.map_[i]);
  if (header_len > max_header_bytes)
    throw model_error(
        fmt::format("{}: header length {} bytes exceeds the {} byte limit (corrupt or not a safetensors "
                    "file)",
                    where, header_len, max_header_bytes));
  if (header_len > size - 8)
    throw model_error(fmt::format("{}: header length {} bytes runs past the end of the {} byte file (file cut short?)",
                                  where, header_len, size));
  const uint64_t data_offset = 8 + header_len;
  const uint64_t data_size = size - data_offset;

  simdjson::dom::parser parser;
  element root;
  const char* header = reinterpret_cast<const char*>(file.map_ + 8);
  if (auto err = parser.parse(header, header_len).get(root); err != simdjson::SUCCESS)
    throw model_error(fmt::format("{}: header is not valid JSON: {}", where, simdjson::error_message(err)));
  if (root.type() != element_type::OBJECT)
    throw model_error(fmt::format("{}: header must be a JSON object, got {}", where, json::type_name(root)));

  header_reader reader(path, data_offset, data_size);
  for (auto [key, value] : json::as_object(root)) {
    if (key == "__metadata__") {
      if (value.type() != element_type::OBJECT)
        throw model_error(
            fmt::format("{}: __metadata__ must be an object of strings, got {}", where, json::type_name(value)));
      for (auto [mkey, mvalue] : json::as_object(value)) {
        if (mvalue.type() != element_type::STRING)
          throw model_error(fmt::format("{}: __metadata__ entry '{}' must be a string, got {}", where, mkey,
                                        json::type_name(mvalue)));
        file.metadata_.insert_or_assign(std::string(mkey), std::string(mvalue.get_string().value_unsafe()));
      }
      continue;
    }
    file.tensors_.push_back(reader.read_tensor(key, value));
  }
  file.by_name_.reserve(file.tensors_.size());
  for (size_t i = 0; i < file.tensors_.size(); ++i)
    if (!file.by_name_.emplace(file.tensors_[i].name, i).second)
      reader.fail(file.tensors_[i].name, "appears twice in the header");

  // Zero-byte tensors occupy nothing, so they may sit anywhere; the rest must not share a byte.
  std::vector<const tensor_info*> by_offset;
  for (const auto& t : file.tensors_)
    if (t.nbytes() > 0)
      by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const tensor_info* a, const tensor_info* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const tensor_info& prev = *by_offset[i - 1];
    const tensor_info& cur = *by_offset[i];
    if (cur.data_begin < prev.data_end)
      throw model_error(fmt::format("{}: tensors '{}' (data_offsets [{}, {}]) and '{}' (data_offsets [{}, {}]) overlap",
                                    where, prev.name, prev.data_begin - data_offset, prev.data_end - data_offset,
                                    cur.name, cur.data_begin - data_offset, cur.data_end - data_offset));
  }
  return file;
}

safetensors_file::safetensors_file(safetensors_file&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::move(other.mapping_)),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {}

safetensors_file& safetensors_file::operator=(safetensors_file&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::move(other.mapping_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    tensors_ = std::move(other.tensors_);
    by_name_ = std::move(other.by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

safetensors_file::~safetensors_file() { unmap(); }

void safetensors_file::unmap() noexcept {
  mapping_.reset();  // unmapped here unless a weight used in place still holds it
  map_ = nullptr;
  size_ = 0;
}

file_mapping::~file_mapping() {
  if (data_ != nullptr)
    ::munmap(const_cast<std::byte*>(data_), size_);
}

const tensor_info* safetensors_file::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

safetensors_checkpoint safetensors_checkpoint::open(const std::filesystem::path& dir) {
  safetensors_checkpoint ckpt;
  ckpt.path_ = dir;
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) {
    ckpt.files_.push_back(std::make_unique<safetensors_file>(safetensors_file::open(dir)));
  } else if (auto single = dir / "model.safetensors"; std::filesystem::exists(single, ec)) {
    // Hugging Face prefers the single file when both are present; so do we.
    ckpt.files_.push_back(std::make_unique<safetensors_file>(safetensors_file::open(single)));
  } else if (auto index_path = dir / "model.safetensors.index.json"; std::filesystem::exists(index_path, ec)) {
    const std::string index_name = index_path.string();
    std::string text = read_text_file(index_path);
    simdjson::dom::parser parser;
    element root;
    if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
      throw model_error(fmt::format("{}: not valid JSON: {}", index_name, simdjson::error_message(err)));
    element weight_map;
    if (root.type() != element_type::OBJECT || root.at_key("weight_map").get(weight_map) != simdjson::SUCCESS)
      throw model_error(fmt::format("{}: has no weight_map", index_name));
    if (weight_map.type() != element_type::OBJECT)
      throw model_error(
          fmt::format("{}: weight_map must be an object, got {}", index_name, json::type_name(weight_map)));

    std::vector<std::pair<std::string, std::string>> listed;  // tensor -> shard file name
    std::unordered_map<std::string, size_t> shard_index;
    for (auto [name, shard] : json::as_object(weight_map)) {
      if (shard.type() != element_type::STRING)
        throw model_error(fmt::format("{}: weight_map entry for tensor '{}' must be a file name, got {}", index_name,
                                      name, json::type_name(shard)));
      std::string shard_name(shard.get_string().value_unsafe());
      // A shard is a file beside the index; never let a checkpoint reach elsewhere on disk.
      if (shard_name.empty() || shard_name == "." || shard_name == ".." || shard_name.find('/') != std::string::npos)
        throw model_error(fmt::format("{}: weight_map names shard '{}' for tensor '{}', which is not a plain file name",
                                      index_name, shard_name, name));
      if (!shard_index.contains(shard_name)) {
        auto shard_path = dir / shard_name;
        if (!std::filesystem::exists(shard_path, ec))
          throw model_error(fmt::format("{}: shard '{}' (named for tensor '{}') does not exist", index_name,
                                        shard_path.string(), name));
        shard_index.emplace(shard_name, ckpt.files_.size());
        ckpt.files_.push_back(std::make_unique<safetensors_file>(safetensors_file::open(shard_path)));
      }
      listed.emplace_back(std::string(name), std::move(shard_name));
    }
    if (listed.empty())
      throw model_error(fmt::format("{}: weight_map is empty", index_name));
    for (const auto& [name, shard_name] : listed) {
      const safetensors_file& shard = *ckpt.files_[shard_index.at(shard_name)];
      if (shard.find(name) == nullptr)
        throw model_error(fmt::format("{}: weight_map puts tensor '{}' in {}, but that shard has no such tensor",
                                      index_name, name, shard.path().string()));
    }
  } else {
    throw model_error(fmt::format("{}: no model.safetensors or model.safetensors.index.json there", dir.string()));
  }

  for (const auto& file : ckpt.files_) {
    for (const tensor_info& info : file->tensors()) {
      auto [it, inserted] = ckpt.by_name_.emplace(info.name, entry{file.get(), &info});
      if (!inserted)
        throw model_error(fmt::format("{}: tensor '{}' is in both {} and {}", dir.string(), info.name,
                                      it->second.file->path().string(), file->path().string()));
    }
  }
  return ckpt;
}

std::optional<safetensors_checkpoint::entry> safetensors_checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    return std::nullopt;
  return it->second;
}

std::vector<std::string> safetensors_checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, e] : by_name_)
    out.emplace_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace actorllm::model
