// Quantized Linear weights out of a checkpoint. Each format is an accessor of full-tensor coordinates (code, zero
// point and scale of weight element (o, i)); one generic loop cuts a shard's slice out through it, so slicing is
// written once and every format splits exactly as the float weights do.
#include "model/quantized_checkpoint.hpp"

#include "model/model_error.hpp"
#include "model/slice_plan.hpp"
#include "util/fast_digest.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <type_traits>

namespace actorllm::model {

namespace {

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

[[noreturn]] void fail(const safetensors_checkpoint::entry& e, std::string_view what) {
  throw model_error(fmt::format("{}: tensor '{}' {}", e.file->path().string(), e.info->name, what));
}

const std::byte* bytes_of(const safetensors_checkpoint::entry& e) { return e.file->data(*e.info); }

void expect_type(const safetensors_checkpoint::entry& e, std::initializer_list<stored_type> allowed) {
  if (std::find(allowed.begin(), allowed.end(), e.info->stored) != allowed.end())
    return;
  std::vector<std::string_view> names;
  for (stored_type t : allowed)
    names.push_back(stored_type_name(t));
  fail(e, fmt::format("has dtype {}, expected {}", stored_type_name(e.info->stored), fmt::join(names, " or ")));
}

void expect_shape(const safetensors_checkpoint::entry& e, const std::vector<int64_t>& want, std::string_view why) {
  if (e.info->shape != want)
    fail(e, fmt::format("has shape {}, expected {} ({})", shape_text(e.info->shape), shape_text(want), why));
}

int32_t read_i32(const std::byte* base, int64_t i) {
  int32_t v;
  std::memcpy(&v, base + 4 * i, 4);
  return v;
}

int64_t read_int(const safetensors_checkpoint::entry& e, int64_t i) {
  const std::byte* p = bytes_of(e);
  switch (e.info->stored) {
    case stored_type::i64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case stored_type::i32:
      return read_i32(p, i);
    default:
      fail(e, "is not an integer tensor");
  }
}

/// A float tensor (F32/F16/BF16; scales, or a float weight) seen as [n_out, n_groups], broadcasting the dimensions
/// it lacks: [n_out, G], [n_out, 1], [n_out], [1] and [] all read.
class float_reader {
 public:
  float_reader() = default;
  float_reader(const safetensors_checkpoint::entry& e, int64_t n_out, int64_t n_groups, bool transposed = false)
      : base_(bytes_of(e)), type_(e.info->type) {
    expect_type(e, {stored_type::f32, stored_type::f16, stored_type::bf16});
    const std::vector<int64_t>& s = e.info->shape;
    if (transposed) {  // AWQ / GPTQ: [n_groups, n_out]
      expect_shape(e, {n_groups, n_out}, "groups x output channels");
      row_stride_ = 1;
      group_stride_ = n_out;
      return;
    }
    const int64_t numel = e.info->numel();
    if (s.size() == 2 && s[0] == n_out && s[1] == n_groups) {
      row_stride_ = n_groups;
      group_stride_ = 1;
    } else if (numel == n_out && (s.size() == 1 || (s.size() == 2 && s[1] == 1))) {
      if (n_groups != 1)
        fail(e, fmt::format("has one scale per channel, but the format has {} groups per channel", n_groups));
      row_stride_ = 1;
    } else if (numel == 1) {
      if (n_groups != 1)
        fail(e, fmt::format("has one scale, but the format has {} groups per channel", n_groups));
    } else {
      fail(e, fmt::format("has shape {}, expected [{}, {}] (output channels x groups), [{}, 1], [1] or []",
                          shape_text(s), n_out, n_groups, n_out));
    }
  }
  /// Values (o, 0) .. (o, n - 1) into out.
  void read_row(int64_t o, int64_t n, float* out) const {
    if (group_stride_ != 1) {
      for (int64_t g = 0; g < n; ++g)
        out[g] = (*this)(o, g);
      return;
    }
    const std::byte* at = base_ + static_cast<size_t>(o * row_stride_) * dtype_size(type_);
    if (type_ == dtype::f32) {
      std::memcpy(out, at, static_cast<size_t>(n) * sizeof(float));
    } else if (type_ == dtype::bf16) {  // the top half of an f32: a loop the compiler vectorises
      for (int64_t g = 0; g < n; ++g) {
        uint16_t h;
        std::memcpy(&h, at + 2 * g, 2);
        out[g] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
    } else {
      for (int64_t g = 0; g < n; ++g)
        out[g] = (*this)(o, g);
    }
  }
  float operator()(int64_t o, int64_t g) const {
    const auto i = static_cast<size_t>(o * row_stride_ + g * group_stride_);
    if (type_ == dtype::f32) {
      float v;
      std::memcpy(&v, base_ + 4 * i, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, base_ + 2 * i, 2);
    return type_ == dtype::f16 ? f16_to_f32(h) : bf16_to_f32(h);
  }

 private:
  const std::byte* base_ = nullptr;
  dtype type_ = dtype::f32;
  int64_t row_stride_ = 0;
  int64_t group_stride_ = 0;
};

/// Position (in nibbles) of output column j of an 8-column AWQ word: AutoAWQ packs columns in the order
/// 0, 2, 4, 6, 1, 3, 5, 7 (so nibble p holds column order[p]); this is that permutation's inverse.
constexpr std::array<int, 8> awq_nibble_of_column{0, 4, 1, 5, 2, 6, 3, 7};

/// Weight element accessors of one integer format in full-tensor coordinates: code(o, i) and zero(o, g) are the
/// format's own lambdas (a template, not std::function: they run once per weight element while a model loads).
/// rows(o0, o1, i0, i1, dst, ld), where a format has one, writes the codes of outputs [o0, o1) x inputs [i0, i1) to
/// dst (rows ld apart) reading each packed word once, where code() reads it once per code it holds.
template <class Code, class Zero, class Rows = std::nullptr_t>
struct int_format {
  int bits;
  int64_t group;  ///< input columns per group (full tensor)
  Code code;
  Zero zero;
  float_reader scale;
  Rows rows = nullptr;
};

uint32_t read_u32(const std::byte* base, int64_t i) { return static_cast<uint32_t>(read_i32(base, i)); }

// Codes of outputs [o0, o1) x inputs [i0, i1) of a format that packs `pack` consecutive inputs of one output per
// word, word(o, k) holding inputs k * pack ..: each word read once (GPTQ, compressed-tensors); edges through code().
template <class Word, class Code>
void rows_by_input_words(int64_t o0, int64_t o1, int64_t i0, int64_t i1, uint8_t* dst, int64_t ld, int bits, Word word,
                         Code code) {
  const int64_t pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t k0 = (i0 + pack - 1) / pack, k1 = i1 / pack;  // whole words inside [i0, i1)
  for (int64_t o = o0; o < o1; ++o) {
    uint8_t* row = dst + (o - o0) * ld;  // input i at row[i - i0]
    if (k0 >= k1) {
      for (int64_t i = i0; i < i1; ++i)
        row[i - i0] = code(o, i);
      continue;
    }
    for (int64_t i = i0; i < k0 * pack; ++i)
      row[i - i0] = code(o, i);
    for (int64_t k = k0; k < k1; ++k) {
      const uint32_t v = word(o, k);
      uint8_t* out = row + (k * pack - i0);
      for (int64_t j = 0; j < pack; ++j)
        out[j] = static_cast<uint8_t>((v >> (bits * j)) & mask);
    }
    for (int64_t i = k1 * pack; i < i1; ++i)
      row[i - i0] = code(o, i);
  }
}

auto awq_format(const quantized_source& src, int64_t n_out, int64_t n_in, int64_t group) {
  const int64_t n_groups = n_in / group;
  expect_type(src.codes, {stored_type::i32});
  expect_type(src.zeros, {stored_type::i32});
  if (n_out % 8 != 0)
    fail(src.codes, fmt::format("packs 8 output channels per int32, but the weight has {} outputs", n_out));
  expect_shape(src.codes, {n_in, n_out / 8}, "input columns x output channels / 8");
  expect_shape(src.zeros, {n_groups, n_out / 8}, "groups x output channels / 8");
  const std::byte* qw = bytes_of(src.codes);
  const std::byte* qz = bytes_of(src.zeros);
  const int64_t words = n_out / 8;
  auto code = [=](int64_t o, int64_t i) {
    return static_cast<uint8_t>((static_cast<uint32_t>(read_i32(qw, i * words + o / 8)) >>
                                 (4 * awq_nibble_of_column[static_cast<size_t>(o % 8)])) &
                                0xfu);
  };
  auto zero = [=](int64_t o, int64_t g) {
    return static_cast<int>((static_cast<uint32_t>(read_i32(qz, g * words + o / 8)) >>
                             (4 * awq_nibble_of_column[static_cast<size_t>(o % 8)])) &
                            0xfu);
  };
  // A word holds 8 outputs of one input: the 8 rows of a word column are written together, each word read once.
  auto rows = [=](int64_t o0, int64_t o1, int64_t i0, int64_t i1, uint8_t* dst, int64_t ld) {
    for (int64_t o = o0; o < o1;) {
      const int64_t w = o / 8, end = std::min(o1, (w + 1) * 8);
      if (o != w * 8 || end != o + 8) {  // part of a word column
        for (; o < end; ++o)
          for (int64_t i = i0; i < i1; ++i)
            dst[(o - o0) * ld + (i - i0)] = code(o, i);
        continue;
      }
      std::array<uint8_t*, 8> out{};  // input i at out[c][i - i0]
      for (size_t c = 0; c < 8; ++c)
        out[c] = dst + (o - o0 + static_cast<int64_t>(c)) * ld;
      for (int64_t i = i0; i < i1; ++i) {
        const uint32_t v = read_u32(qw, i * words + w);
        for (size_t c = 0; c < 8; ++c)
          out[c][i - i0] = static_cast<uint8_t>((v >> (4 * awq_nibble_of_column[c])) & 0xfu);
      }
      o = end;
    }
  };
  return int_format{4, group, code, zero, float_reader(src.scales, n_out, n_groups, true), rows};
}

auto gptq_format(const quantized_source& src, const quantization_config& q, int64_t n_out, int64_t n_in,
                 int64_t group) {
  const int64_t n_groups = n_in / group;
  const int bits = q.bits;
  const int64_t pack = 32 / bits;
  expect_type(src.codes, {stored_type::i32});
  expect_type(src.zeros, {stored_type::i32});
  if (n_in % pack != 0 || n_out % pack != 0)
    fail(src.codes,
         fmt::format("packs {} values per int32, which does not divide the weight's [{}, {}]", pack, n_out, n_in));
  expect_shape(src.codes, {n_in / pack, n_out}, fmt::format("input columns / {} x output channels", pack));
  expect_shape(src.zeros, {n_groups, n_out / pack}, fmt::format("groups x output channels / {}", pack));
  if (src.g_idx.file != nullptr) {
    expect_type(src.g_idx, {stored_type::i32, stored_type::i64});
    expect_shape(src.g_idx, {n_in}, "one group index per input column");
    for (int64_t i = 0; i < n_in; ++i)
      if (read_int(src.g_idx, i) != i / group)
        fail(src.g_idx, fmt::format("maps input column {} to group {}, not {}: act-order (desc_act) checkpoints are "
                                    "not implemented",
                                    i, read_int(src.g_idx, i), i / group));
  }
  const std::byte* qw = bytes_of(src.codes);
  const std::byte* qz = bytes_of(src.zeros);
  const uint32_t mask = (1u << bits) - 1;
  const int offset = q.gptq_zero_offset ? 1 : 0;
  auto code = [=](int64_t o, int64_t i) {
    return static_cast<uint8_t>((static_cast<uint32_t>(read_i32(qw, (i / pack) * n_out + o)) >> (bits * (i % pack))) &
                                mask);
  };
  const int64_t zero_words = n_out / pack;
  auto zero = [=](int64_t o, int64_t g) {
    return static_cast<int>((static_cast<uint32_t>(read_i32(qz, g * zero_words + o / pack)) >> (bits * (o % pack))) &
                            mask) +
           offset;
  };
  auto rows = [=](int64_t o0, int64_t o1, int64_t i0, int64_t i1, uint8_t* dst, int64_t ld) {
    rows_by_input_words(
        o0, o1, i0, i1, dst, ld, bits, [=](int64_t o, int64_t k) { return read_u32(qw, k * n_out + o); }, code);
  };
  return int_format{bits, group, code, zero, float_reader(src.scales, n_out, n_groups, true), rows};
}

auto ct_packed_format(const quantized_source& src, const quantization_config& q, int64_t n_out, int64_t n_in,
                      int64_t group) {
  const int bits = q.bits;
  const int64_t pack = 32 / bits;
  expect_type(src.codes, {stored_type::i32});
  const int64_t words = (n_in + pack - 1) / pack;
  expect_shape(src.codes, {n_out, words}, fmt::format("output channels x input columns / {}", pack));
  if (src.shape.file != nullptr) {
    expect_type(src.shape, {stored_type::i64, stored_type::i32});
    if (src.shape.info->numel() != 2 || read_int(src.shape, 0) != n_out || read_int(src.shape, 1) != n_in)
      fail(src.shape, fmt::format("does not say [{}, {}], the model's shape of the weight", n_out, n_in));
  }
  const std::byte* wp = bytes_of(src.codes);
  const uint32_t mask = (1u << bits) - 1;
  auto code = [=](int64_t o, int64_t i) {
    return static_cast<uint8_t>((static_cast<uint32_t>(read_i32(wp, o * words + i / pack)) >> (bits * (i % pack))) &
                                mask);
  };
  const int mid = 1 << (bits - 1);  // codes are the signed values plus 2^(bits-1)
  auto zero = [=](int64_t, int64_t) { return mid; };
  auto rows = [=](int64_t o0, int64_t o1, int64_t i0, int64_t i1, uint8_t* dst, int64_t ld) {
    rows_by_input_words(
        o0, o1, i0, i1, dst, ld, bits, [=](int64_t o, int64_t k) { return read_u32(wp, o * words + k); }, code);
  };
  return int_format{bits, group, code, zero, float_reader(src.scales, n_out, n_in / group), rows};
}

auto int8_format(const quantized_source& src, int64_t n_out, int64_t n_in, int64_t group) {
  expect_type(src.codes, {stored_type::i8});
  expect_shape(src.codes, {n_out, n_in}, "the model's shape of the weight");
  const std::byte* w = bytes_of(src.codes);
  auto code = [=](int64_t o, int64_t i) {
    return static_cast<uint8_t>(static_cast<int>(static_cast<int8_t>(w[o * n_in + i])) + 128);
  };
  auto zero = [](int64_t, int64_t) { return 128; };
  return int_format{8, group, code, zero, float_reader(src.scales, n_out, n_in / group)};
}

safetensors_checkpoint::entry require(const safetensors_checkpoint& ckpt, const std::string& name,
                                      std::string_view why) {
  auto e = ckpt.find(name);
  if (!e)
    throw model_error(fmt::format("{}: the checkpoint lacks '{}' ({})", ckpt.path().string(), name, why));
  return *e;
}

/// The [begin, end) of rows and of columns tp rank `tp_rank` holds of a 2-D weight.
struct slice_box {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

slice_box box_of(const weight_decl& decl, int tp_rank, int tp_size) {
  const tensor_slice s = slice_for(decl, tp_rank, tp_size);
  slice_box b{0, decl.shape[0], 0, decl.shape[1]};
  if (s.dim == 0) {
    b.r0 = s.begin;
    b.r1 = s.end;
  } else {
    b.c0 = s.begin;
    b.c1 = s.end;
  }
  return b;
}

/// Runs fn(r0, r1) over row ranges of about 64 rows on the loader's threads.
void for_row_chunks(int64_t n_rows, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t chunk = 64;
  const auto n_chunks = static_cast<size_t>((n_rows + chunk - 1) / chunk);
  parallel_for(n_chunks, [&](size_t c) {
    const int64_t r0 = static_cast<int64_t>(c) * chunk;
    fn(r0, std::min(n_rows, r0 + chunk));
  });
}

}  // namespace

float fp8_channel_scale(float amax) { return amax > 0 ? amax / 448.0f : 1.0f; }

std::string_view linear_storage_name(linear_storage s) {
  switch (s) {
    case linear_storage::float_weight:
      return "float";
    case linear_storage::awq:
      return "awq";
    case linear_storage::gptq:
      return "gptq";
    case linear_storage::ct_packed:
      return "compressed-tensors pack-quantized";
    case linear_storage::int8_weight:
      return "int8";
    case linear_storage::fp8_weight:
      return "fp8";
  }
  return "?";
}

int64_t source_group_size(const quantized_source& src, const quantization_config& quant, int64_t n_in) {
  switch (src.storage) {
    case linear_storage::awq:
    case linear_storage::gptq:
    case linear_storage::ct_packed:
      return quant.group_size > 0 ? quant.group_size : n_in;
    case linear_storage::int8_weight: {
      // int-quantized: the scale's shape says (per channel, or groups when the config says so).
      return quant.group_size > 0 ? quant.group_size : n_in;
    }
    case linear_storage::float_weight:
    case linear_storage::fp8_weight:
      return n_in;
  }
  return n_in;
}

quantized_source find_quantized_source(const safetensors_checkpoint& ckpt, const weight_decl& decl,
                                       const quantization_config& quant) {
  quantized_source src;
  const std::string_view suffix = ".weight";
  if (decl.shape.size() != 2 || decl.name.size() <= suffix.size() ||
      decl.name.compare(decl.name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return src;
  src.prefix = decl.name.substr(0, decl.name.size() - suffix.size());
  const int64_t n_out = decl.shape[0];
  const int64_t n_in = decl.shape[1];
  auto name = [&](std::string_view part) { return fmt::format("{}.{}", src.prefix, part); };
  auto announce = [&](quant_method needed, std::string_view found) {
    if (quant.method != needed)
      throw model_error(
          fmt::format("{}: the checkpoint holds '{}' ({}), but config.json's quantization_config says "
                      "{}",
                      ckpt.path().string(), name(found), linear_storage_name(src.storage),
                      quant.quantized() ? quant.describe() : std::string("nothing (a float model)")));
  };

  if (auto qweight = ckpt.find(name("qweight"))) {
    src.storage = quant.method == quant_method::gptq ? linear_storage::gptq : linear_storage::awq;
    if (quant.method != quant_method::gptq)
      announce(quant_method::awq, "qweight");
    src.codes = *qweight;
    src.zeros = require(ckpt, name("qzeros"), "the zero points beside qweight");
    src.scales = require(ckpt, name("scales"), "the scales beside qweight");
    if (auto g = ckpt.find(name("g_idx")))
      src.g_idx = *g;
  } else if (auto packed = ckpt.find(name("weight_packed"))) {
    src.storage = linear_storage::ct_packed;
    announce(quant_method::compressed_tensors, "weight_packed");
    if (quant.format != ct_format::pack_quantized)
      throw model_error(fmt::format("{}: '{}' is pack-quantized, but the config's format is another",
                                    ckpt.path().string(), name("weight_packed")));
    src.codes = *packed;
    src.scales = require(ckpt, name("weight_scale"), "the scales beside weight_packed");
    if (auto shape = ckpt.find(name("weight_shape")))
      src.shape = *shape;
    if (ckpt.find(name("weight_zero_point")))
      throw model_error(
          fmt::format("{}: '{}' holds zero points: asymmetric pack-quantized weights are not "
                      "implemented",
                      ckpt.path().string(), name("weight_zero_point")));
  } else if (auto w = ckpt.find(decl.name); w && w->info->stored == stored_type::i8) {
    src.storage = linear_storage::int8_weight;
    announce(quant_method::compressed_tensors, "weight");
    src.codes = *w;
    src.scales = require(ckpt, name("weight_scale"), "the scale beside an int8 weight");
    if (ckpt.find(name("weight_zero_point")))
      throw model_error(fmt::format("{}: '{}': asymmetric int8 weights are not implemented", ckpt.path().string(),
                                    name("weight_zero_point")));
  } else if (w && w->info->stored == stored_type::f8_e4m3) {
    src.storage = linear_storage::fp8_weight;
    if (quant.method != quant_method::compressed_tensors)
      announce(quant_method::fp8, "weight");
    src.codes = *w;
    if (auto s = ckpt.find(name("weight_scale")))
      src.scales = *s;
    else if (auto inv = ckpt.find(name("weight_scale_inv")))
      src.scales = *inv;
    else
      throw model_error(fmt::format("{}: the checkpoint lacks '{}' (the scale of an fp8 weight)", ckpt.path().string(),
                                    name("weight_scale")));
    expect_shape(src.codes, {n_out, n_in}, "the model's shape of the weight");
    const int64_t numel = src.scales.info->numel();
    const bool per_tensor = numel == 1;
    const bool per_channel = numel == n_out && src.scales.info->shape.size() <= 2;
    const bool block = quant.block_out > 0;
    expect_type(src.scales, {stored_type::f32, stored_type::f16, stored_type::bf16});
    if (block) {
      expect_shape(src.scales,
                   {(n_out + quant.block_out - 1) / quant.block_out, (n_in + quant.block_in - 1) / quant.block_in},
                   fmt::format("one scale per {}x{} block", quant.block_out, quant.block_in));
    } else if (!per_tensor && !per_channel) {
      fail(src.scales, fmt::format("has shape {}: expected one scale per tensor ([] or [1]) or per output channel "
                                   "([{}] or [{}, 1])",
                                   shape_text(src.scales.info->shape), n_out, n_out));
    }
    return src;
  } else {
    return src;  // float (checked by the plain loader) or absent
  }

  // Integer formats: check every tensor against the declared shape now, before anything is copied.
  const int64_t group = source_group_size(src, quant, n_in);
  if (n_in % group != 0)
    fail(src.codes, fmt::format("has groups of {} input columns, which do not divide its {} columns", group, n_in));
  switch (src.storage) {
    case linear_storage::awq:
      (void)awq_format(src, n_out, n_in, group);
      break;
    case linear_storage::gptq:
      (void)gptq_format(src, quant, n_out, n_in, group);
      break;
    case linear_storage::ct_packed:
      (void)ct_packed_format(src, quant, n_out, n_in, group);
      break;
    case linear_storage::int8_weight:
      (void)int8_format(src, n_out, n_in, group);
      break;
    case linear_storage::float_weight:
    case linear_storage::fp8_weight:
      break;
  }
  return src;
}

void check_group_split(const weight_decl& decl, int64_t group_size, int tp_size) {
  if (decl.kind != shard_kind::row || decl.shape.size() != 2 || group_size >= decl.shape[1])
    return;  // column / vocab splits cut output rows, which never share a group; per-channel scales split freely
  auto splits_groups = [&](int tp) {
    for (int r = 0; r < tp; ++r) {
      const tensor_slice s = slice_for(decl, r, tp);
      if (s.begin % group_size != 0 || s.end % group_size != 0)
        return true;
    }
    return false;
  };
  if (!splits_groups(tp_size))
    return;
  std::vector<int> fine;
  for (int tp = 1; tp <= 64; ++tp) {
    try {
      if (!splits_groups(tp))
        fine.push_back(tp);
    } catch (const model_error&) {  // that size does not split the heads / units at all
    }
  }
  throw model_error(
      fmt::format("{}: tensor_parallel_size {} would split a quantization group of {} input columns "
                  "between ranks; sizes that keep groups whole: {}",
                  decl.name, tp_size, group_size, fmt::join(fine, ", ")));
}

namespace {

// Codes, zero points and scales of the slice b of a format's tensors into q (its sizes set), validated; errors name
// the checkpoint tensor `codes_name` (and `zeros_name` for a zero point past 8 bits).
template <class Format>
void fill_slice(quantized_linear& q, const Format& f, const slice_box& b, int64_t first_group,
                const std::string& codes_name, const std::string& zeros_name) {
  const int64_t n_groups = q.n_groups();
  q.codes.resize(static_cast<size_t>(q.n_out * q.n_in));
  q.scales.resize(static_cast<size_t>(q.n_out * n_groups));
  q.zeros.resize(static_cast<size_t>(q.n_out * n_groups));
  for_row_chunks(q.n_out, [&](int64_t r0, int64_t r1) {
    if constexpr (!std::is_null_pointer_v<decltype(f.rows)>)
      f.rows(b.r0 + r0, b.r0 + r1, b.c0, b.c1, q.codes.data() + r0 * q.n_in, q.n_in);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = b.r0 + r;
      if constexpr (std::is_null_pointer_v<decltype(f.rows)>)
        for (int64_t i = 0; i < q.n_in; ++i)
          q.codes[static_cast<size_t>(r * q.n_in + i)] = f.code(o, b.c0 + i);
      for (int64_t g = 0; g < n_groups; ++g) {
        // GPTQ v1 stores zero - 1, so a stored 2^bits - 1 reads as 2^bits (what its kernels compute too): a 4-bit
        // zero of 16 is kept; 256 does not fit an 8-bit one.
        const int z = f.zero(o, first_group + g);
        if (z > 255)
          throw model_error(fmt::format("{}: output channel {} group {} has zero point {}, beyond 8 bits", zeros_name,
                                        o, first_group + g, z));
        q.zeros[static_cast<size_t>(r * n_groups + g)] = static_cast<uint8_t>(z);
        q.scales[static_cast<size_t>(r * n_groups + g)] = f.scale(o, first_group + g);
      }
    }
  });
  try {
    q.validate();
  } catch (const std::invalid_argument& e) {
    throw model_error(fmt::format("{}: {}", codes_name, e.what()));
  }
}

// How read_quantized_slice turns a format's tensors into codes, scales and zero points: part of the name of what a
// backend packs from them (quantized_linear::origin). A change to what it reads must change this.
constexpr uint64_t quantized_slice_reader_version = 1;

}  // namespace

quantized_linear read_quantized_slice(const quantized_source& src, const weight_decl& decl,
                                      const quantization_config& quant, int tp_rank, int tp_size) {
  if (decl.kind == shard_kind::vocab)
    throw model_error(
        fmt::format("{}: a quantized lm_head ({}) is not implemented; vLLM's GPTQ lm_head option "
                    "included",
                    decl.name, linear_storage_name(src.storage)));
  const int64_t n_out = decl.shape[0];
  const int64_t n_in = decl.shape[1];
  const int64_t group = source_group_size(src, quant, n_in);
  check_group_split(decl, group, tp_size);
  const slice_box b = box_of(decl, tp_rank, tp_size);
  quantized_linear q;
  q.n_out = b.r1 - b.r0;
  q.n_in = b.c1 - b.c0;
  q.group_size = group >= n_in ? q.n_in : group;
  q.activations = src.storage == linear_storage::int8_weight ? quant.activations : activation_quant::none;
  const int64_t first_group = b.c0 / group;
  const std::string codes_name = src.codes.info->name;
  const std::string zeros_name = src.zeros.file != nullptr ? src.zeros.info->name : codes_name;
  // Where every tensor it reads lies in a file mapping, the weight is left unread: named by those places (and the
  // slice and the format), and read when a backend needs the codes, which one holding the packed layout under that
  // name never does. The mappings stay alive with it.
  std::vector<std::shared_ptr<const file_mapping>> mappings;
  std::vector<file_origin> files;
  util::fast_digest name;
  bool mapped = true;
  name.add(quantized_slice_reader_version);
  for (uint64_t v : {static_cast<uint64_t>(src.storage), static_cast<uint64_t>(n_out), static_cast<uint64_t>(n_in),
                     static_cast<uint64_t>(group), static_cast<uint64_t>(b.r0), static_cast<uint64_t>(b.r1),
                     static_cast<uint64_t>(b.c0), static_cast<uint64_t>(b.c1), static_cast<uint64_t>(q.activations)})
    name.add(v);
  for (const safetensors_checkpoint::entry* e : {&src.codes, &src.scales, &src.zeros}) {
    if (e->file == nullptr) {
      name.add(0);  // no such tensor (a symmetric format's zero points)
      continue;
    }
    const std::shared_ptr<const file_mapping>& m = e->file->mapping();
    if (m == nullptr) {
      mapped = false;
      break;
    }
    const file_origin o = m->origin_of(e->file->data(*e->info));
    for (uint64_t field : {o.device, o.inode, o.size, static_cast<uint64_t>(o.modified_ns),
                           static_cast<uint64_t>(o.changed_ns), o.offset, static_cast<uint64_t>(e->info->type)})
      name.add(field);
    mappings.push_back(m);
    file_origin whole = o;
    whole.offset = 0;
    if (std::find(files.begin(), files.end(), whole) == files.end())
      files.push_back(std::move(whole));
  }
  auto take = [&](auto f) {
    q.bits = f.bits;
    if (!mapped) {
      fill_slice(q, f, b, first_group, codes_name, zeros_name);
      return;
    }
    q.origin = name.value();
    q.origin_files = std::move(files);
    q.unread = [f, b, first_group, codes_name, zeros_name, keep = std::move(mappings)](quantized_linear& w) {
      fill_slice(w, f, b, first_group, codes_name, zeros_name);
    };
  };
  switch (src.storage) {
    case linear_storage::awq:
      take(awq_format(src, n_out, n_in, group));
      break;
    case linear_storage::gptq:
      take(gptq_format(src, quant, n_out, n_in, group));
      break;
    case linear_storage::ct_packed:
      take(ct_packed_format(src, quant, n_out, n_in, group));
      break;
    case linear_storage::int8_weight:
      take(int8_format(src, n_out, n_in, group));
      break;
    case linear_storage::float_weight:
    case linear_storage::fp8_weight:
      throw model_error(fmt::format("{}: not an integer-quantized weight", decl.name));
  }
  return q;
}

host_tensor read_fp8_slice_as_bf16(const quantized_source& src, const weight_decl& decl,
                                   const quantization_config& quant, int tp_rank, int tp_size) {
  const int64_t n_out = decl.shape[0];
  const int64_t n_in = decl.shape[1];
  const slice_box b = box_of(decl, tp_rank, tp_size);
  host_tensor out(dtype::bf16, {b.r1 - b.r0, b.c1 - b.c0});
  const std::byte* w = bytes_of(src.codes);
  const bool block = quant.block_out > 0;
  const int64_t block_cols = block ? (n_in + quant.block_in - 1) / quant.block_in : 0;
  const float_reader scales =
      block ? float_reader(src.scales, src.scales.info->shape[0] * block_cols, 1) : float_reader(src.scales, n_out, 1);
  auto* dst = out.data_as<uint16_t>();
  const int64_t cols = b.c1 - b.c0;
  for_row_chunks(b.r1 - b.r0, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = b.r0 + r;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = b.c0 + c;
        const float s = block ? scales((o / quant.block_out) * block_cols + i / quant.block_in, 0) : scales(o, 0);
        const auto code = static_cast<uint8_t>(w[o * n_in + i]);
        dst[r * cols + c] = f32_to_bf16(fp8_e4m3_to_f32(code) * s);
      }
    }
  });
  return out;
}

host_tensor quantize_fp8_slice_as_bf16(const safetensors_checkpoint::entry& src, const weight_decl& decl, int tp_rank,
                                       int tp_size) {
  if (!src.info->is_float())
    fail(src, fmt::format("has dtype {}: --quantization fp8 quantizes float checkpoints",
                          stored_type_name(src.info->stored)));
  const int64_t n_in = decl.shape[1];
  const slice_box b = box_of(decl, tp_rank, tp_size);
  const float_reader element(src, decl.shape[0], n_in);
  const int64_t rows = b.r1 - b.r0, cols = b.c1 - b.c0;
  // Reads the checkpoint through `element` (which points into its mapping), never through `src`: this may run after
  // the checkpoint object is gone.
  auto quantize = [element, b, n_in, rows, cols](void* out) {
    auto* dst = static_cast<uint16_t*>(out);
    for_row_chunks(rows, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(n_in));  // read once: for its scale, then rounded
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = b.r0 + r;
        element.read_row(o, n_in, row.data());  // the whole row: the same scale whatever the layout
        float amax = 0;
        for (float v : row)
          amax = std::max(amax, std::fabs(v));
        fp8_e4m3_round_trip_to_bf16(row.data() + b.c0, cols, fp8_channel_scale(amax), dst + r * cols);
      }
    });
  };
  if (src.file->mapping() == nullptr) {
    host_tensor out(dtype::bf16, {rows, cols});
    quantize(out.data());
    return out;
  }
  const size_t element_size = dtype_size(src.info->type);
  file_origin origin = src.file->mapping()->origin_of(src.file->data(*src.info) +
                                                      static_cast<size_t>(b.r0 * n_in + b.c0) * element_size);
  origin.row_stride = cols == n_in ? 0 : static_cast<uint64_t>(n_in) * element_size;
  origin.transform = fp8_at_load_transform;
  return host_tensor::deferred(dtype::bf16, {rows, cols}, std::move(quantize), src.file->mapping(), std::move(origin));
}

}  // namespace actorllm::model
