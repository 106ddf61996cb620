// Helpers for the model/ tests: writing safetensors files (valid and deliberately broken), small Llama-family
// checkpoints, and catching model_error messages.
#pragma once

#include "kernels/dtype.hpp"
#include "model/model_error.hpp"
#include "model/model_weights.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace actorllm::model::test_util {

/// The message of the model_error `fn` throws; fails the test (and returns "") when it throws nothing or something
/// else.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const model_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("expected a model_error, got another exception: " << e.what());
    return "";
  }
  FAIL_CHECK("expected a model_error, nothing was thrown");
  return "";
}

/// True when `text` contains every one of `parts`; prints the text otherwise.
inline bool mentions(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& p : parts) {
    if (text.find(p) == std::string::npos) {
      MESSAGE("message '" << text << "' does not mention '" << p << "'");
      return false;
    }
  }
  return true;
}

/// A fresh directory (test_paths' make_temp_dir) removed when the test process exits, so runs leave nothing behind.
inline std::filesystem::path temp_dir(const std::string& prefix) {
  struct remove_at_exit {
    std::vector<std::filesystem::path> dirs;
    ~remove_at_exit() {
      for (const auto& d : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    }
  };
  static remove_at_exit registry;
  auto dir = actorllm::test::make_temp_dir(prefix);
  registry.dirs.push_back(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

/// 8-byte little-endian header length, then the header text, then the data bytes: for hand-made broken files.
inline std::string raw_safetensors(const std::string& header, const std::string& data, uint64_t header_len) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((header_len >> (8 * i)) & 0xff);
  return out + header + data;
}
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  return raw_safetensors(header, data, header.size());
}

/// A tensor to write: its bytes in the file's layout.
struct test_tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string safetensors_dtype_name(dtype t) {
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
  return "?";
}

/// A valid safetensors file holding `tensors` in order (header padded to 8 bytes as the reference writer does).
inline std::string make_safetensors(const std::vector<test_tensor>& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (const auto& t : tensors) {
    header +=
        fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", t.name,
                    safetensors_dtype_name(t.type), fmt::join(t.shape, ","), data.size(), data.size() + t.bytes.size());
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0)
    header += ' ';
  return raw_safetensors(header, data);
}

/// A checkpoint in `dir`: `config_json` as config.json and every tensor of `w` (in its own dtype) in model.safetensors.
inline void write_checkpoint(const std::filesystem::path& dir, const std::string& config_json, const model_weights& w) {
  write_file(dir / "config.json", config_json);
  std::vector<test_tensor> tensors;
  for (const auto& [name, t] : w.tensors()) {
    test_tensor tt{name, t.type, t.shape, {}};
    tt.bytes.assign(static_cast<const char*>(t.data()), t.nbytes());
    tensors.push_back(std::move(tt));
  }
  write_file(dir / "model.safetensors", make_safetensors(tensors));
}

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// A tensor of `shape` whose element i is f(i), stored as `type`.
inline test_tensor make_tensor(std::string name, dtype type, std::vector<int64_t> shape,
                               const std::function<float(int64_t)>& f) {
  test_tensor t{std::move(name), type, std::move(shape), {}};
  const int64_t n = numel_of(t.shape);
  t.bytes.resize(static_cast<size_t>(n) * dtype_size(type));
  for (int64_t i = 0; i < n; ++i)
    store_from_f32(t.bytes.data(), type, static_cast<size_t>(i), f(i));
  return t;
}

/// Distinct, exactly representable (in bf16 too) values for tensor number `salt`: small integers times 1/64.
inline std::function<float(int64_t)> pattern(int salt) {
  return [salt](int64_t i) { return static_cast<float>(((i * 7 + salt * 13) % 251) - 125) / 64.0f; };
}

}  // namespace actorllm::model::test_util
