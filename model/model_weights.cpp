// Named host tensors of one shard.
#include "model/model_weights.hpp"

#include "model/model_error.hpp"

#include <fmt/format.h>

namespace actorllm::model {

const host_tensor& model_weights::get(std::string_view name) const {
  if (const host_tensor* t = find(name))
    return *t;
  throw model_error(fmt::format("weight '{}' is not loaded in this shard ({} tensors loaded)", name, size()));
}

host_tensor* model_weights::find_mutable(std::string_view name) {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const host_tensor* model_weights::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const quantized_linear* model_weights::find_quantized(std::string_view name) const {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

quantized_linear* model_weights::find_quantized_mutable(std::string_view name) {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

quantized_linear& model_weights::insert_quantized(std::string name, quantized_linear weight) {
  if (tensors_.find(name) != tensors_.end())
    throw model_error(fmt::format("weight '{}' is declared twice", name));
  const size_t bytes = weight.packed_bytes();
  auto [it, inserted] = quantized_.try_emplace(std::move(name), std::move(weight));
  if (!inserted)
    throw model_error(fmt::format("weight '{}' is declared twice", it->first));
  total_bytes_ += bytes;
  return it->second;
}

void model_weights::replace_with_quantized(std::string_view name, quantized_linear weight) {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw model_error(fmt::format("weight '{}' is not loaded in this shard", name));
  total_bytes_ -= it->second.nbytes();
  std::string key = it->first;
  tensors_.erase(it);
  insert_quantized(std::move(key), std::move(weight));
}

host_tensor& model_weights::insert(std::string name, host_tensor tensor) {
  if (quantized_.find(name) != quantized_.end())
    throw model_error(fmt::format("weight '{}' is declared twice", name));
  const size_t bytes = tensor.nbytes();
  auto [it, inserted] = tensors_.try_emplace(std::move(name), std::move(tensor));
  if (!inserted)
    throw model_error(fmt::format("weight '{}' is declared twice", it->first));
  total_bytes_ += bytes;
  return it->second;
}

}  // namespace actorllm::model
