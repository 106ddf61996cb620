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

host_tensor& model_weights::insert(std::string name, host_tensor tensor) {
  const size_t bytes = tensor.nbytes();
  auto [it, inserted] = tensors_.try_emplace(std::move(name), std::move(tensor));
  if (!inserted)
    throw model_error(fmt::format("weight '{}' is declared twice", it->first));
  total_bytes_ += bytes;
  return it->second;
}

}  // namespace actorllm::model
