// The weights one shard holds, by Hugging Face name: what the loader (or the dummy filler) produces and the forward
// pass reads.
#pragma once

#include "kernels/quantized_linear.hpp"
#include "model/tensor.hpp"

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::model {

/// Named host tensors of one shard.
class model_weights {
 public:
  /// The tensor called `name`; model_error when this shard does not hold it.
  const host_tensor& get(std::string_view name) const;
  /// The tensor called `name`, or nullptr.
  const host_tensor* find(std::string_view name) const;
  /// The tensor called `name` for moving out of (bind_weights), or nullptr.
  host_tensor* find_mutable(std::string_view name);
  /// Sum of nbytes() over all tensors (packed_bytes() for the quantized ones).
  size_t total_bytes() const { return total_bytes_; }
  /// Number of tensors (float and quantized).
  size_t size() const { return tensors_.size() + quantized_.size(); }
  /// Every tensor, ordered by name.
  const std::map<std::string, host_tensor, std::less<>>& tensors() const { return tensors_; }

  /// The quantized Linear weight called `name` ("...q_proj.weight", its float name), or nullptr.
  const quantized_linear* find_quantized(std::string_view name) const;
  /// For moving out of (bind_weights), or nullptr.
  quantized_linear* find_quantized_mutable(std::string_view name);
  /// Every quantized weight, ordered by name.
  const std::map<std::string, quantized_linear, std::less<>>& quantized() const { return quantized_; }
  /// Adds a quantized Linear weight under its float name (model_error if the name is taken by either kind).
  quantized_linear& insert_quantized(std::string name, quantized_linear weight);
  /// Replaces the float tensor `name` with a quantized form (bench and tests: weights quantized after loading).
  void replace_with_quantized(std::string_view name, quantized_linear weight);

  /// Adds a tensor (the loaders use this; so can tests that build weights by hand). model_error if the name is
  /// taken. The returned reference stays valid as long as this object.
  host_tensor& insert(std::string name, host_tensor tensor);

 private:
  std::map<std::string, host_tensor, std::less<>> tensors_;
  std::map<std::string, quantized_linear, std::less<>> quantized_;
  size_t total_bytes_ = 0;
};

}  // namespace actorllm::model
