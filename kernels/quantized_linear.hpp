// A quantized Linear weight in one canonical form, whatever checkpoint format it came from (AWQ, GPTQ,
// compressed-tensors): the model layer unpacks a checkpoint's int32-packed codes into this, and
// backend::import_quantized_linear lays it out for the backend's kernels. Also the round-to-nearest quantizer that
// tests and benchmarks use to make quantized weights from float ones.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "util/fast_digest.hpp"

namespace actorllm {

/// How the activations meet a quantized weight.
enum class activation_quant : uint8_t {
  none,            ///< weight-only (W4A16, W8A16): the activations stay float
  int8_per_token,  ///< W8A8 (8-bit weights only): each row of x is quantized on the fly to int8, symmetric, with
                   ///< its own scale max|x| / 127 (vLLM's dynamic per-token scheme); the sums are integer
};

/// "none", "int8_per_token".
const char* activation_quant_name(activation_quant a);

/// A Linear weight [n_out, n_in] (Hugging Face layout) as integer codes with per-group scales and zero points:
///   w[o, i] = (codes[o, i] - zeros[o, g]) * scales[o, g],  g = i / group_size.
/// A symmetric format has zeros 2^(bits-1) everywhere (a signed code c is stored as c + 2^(bits-1)); per-channel
/// quantization is one group of n_in.
struct quantized_linear {
  int bits = 4;                ///< 4 or 8
  int64_t n_out = 0;           ///< output rows
  int64_t n_in = 0;            ///< input columns
  int64_t group_size = 0;      ///< input columns per scale; divides n_in
  std::vector<uint8_t> codes;  ///< [n_out, n_in] row-major, each < 2^bits
  std::vector<float> scales;   ///< [n_out, n_groups()] row-major
  /// [n_out, n_groups()] row-major, each <= 2^bits (GPTQ v1's zero offset makes 2^bits possible for 4-bit codes).
  std::vector<uint8_t> zeros;
  activation_quant activations = activation_quant::none;

  /// Where the codes, scales and zero points come from, when a loader knows: a digest of the checkpoint files'
  /// identities, the tensors' places in them, the slice and the stored format, everything a backend's packed layout of
  /// this weight follows from (so it can keep that layout in a cache under this name; kernels/cpu/packed_weight_cache).
  std::optional<util::digest128> origin;
  /// The files `origin` names (the cache records them, to drop entries whose checkpoint is gone).
  std::vector<file_origin> origin_files;
  /// Set while codes, scales and zeros are not read yet (the loader defers them, so that a backend holding the packed
  /// layout under `origin` reads nothing of the checkpoint): read() calls it once to fill them.
  std::function<void(quantized_linear&)> unread;

  /// Fills codes, scales and zeros if they are still unread (see `unread`); a no-op otherwise.
  void read() {
    if (unread) {
      auto fill = std::move(unread);
      unread = nullptr;
      fill(*this);
    }
  }

  int64_t n_groups() const { return group_size > 0 ? n_in / group_size : 0; }
  /// The dequantized weight w[o, i] (in float: exact, since (code - zero) has at most 9 bits).
  float dequantized(int64_t o, int64_t i) const {
    const auto g = static_cast<size_t>(o * n_groups() + i / group_size);
    return static_cast<float>(static_cast<int>(codes[static_cast<size_t>(o * n_in + i)]) - static_cast<int>(zeros[g])) *
           scales[g];
  }
  /// Throws std::invalid_argument naming what is wrong: bits not 4 or 8, non-positive sizes, a group size that does
  /// not divide n_in, vectors of the wrong length, codes or zeros out of range, a non-finite scale, int8_per_token
  /// activations with 4-bit weights or with zeros other than 128 (W8A8 is symmetric).
  void validate() const;
  /// Bytes a packed layout needs at least: the codes at `bits` each plus a float scale and a byte zero per group.
  size_t packed_bytes() const;
  /// "int4 g128 [4096, 4096]", "int8 per-channel W8A8 [1024, 512]".
  std::string describe() const;
};

/// Round-to-nearest quantization of a float weight w [n_out, n_in] (row-major): per group the scale maps the
/// group's range onto the codes; `symmetric`: zero 2^(bits-1) and scale max|w| / (2^(bits-1) - 1), else the
/// min..max range onto 0..2^bits-1 with a rounded zero point. group_size 0 means per channel (n_in). A group of
/// zeros gets scale 1 (any scale reproduces it).
quantized_linear quantize_linear_rtn(const float* w, int64_t n_out, int64_t n_in, int bits, int64_t group_size,
                                     bool symmetric);

struct tensor;
/// The weight dequantized to a host bf16 tensor [n_out, n_in] (each (code - zero) * scale rounded to bf16 once).
tensor dequantize_to_bf16(const quantized_linear& w);

}  // namespace actorllm
