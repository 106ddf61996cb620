// The host-memory forms of the tensor collectives.
#include "kernels/collective.hpp"

#include "util/check.hpp"

namespace actorllm {

void tp_collective::all_reduce_sum(const tensor& t) {
  ACTORLLM_CHECK(t.type == dtype::f32, "all_reduce_sum: the tensor must be f32");
  ACTORLLM_CHECK(t.where().kind == device_kind::cpu,
                 "all_reduce_sum: this communicator reduces host memory only; the tensor is on a device");
  all_reduce_sum(t.data_as<float>(), t.numel());
}

void tp_collective::all_gather(const tensor& in, const tensor& out) {
  ACTORLLM_CHECK(in.type == dtype::f32 && out.type == dtype::f32, "all_gather: the tensors must be f32");
  ACTORLLM_CHECK(in.where().kind == device_kind::cpu && out.where().kind == device_kind::cpu,
                 "all_gather: this communicator gathers host memory only; a tensor is on a device");
  ACTORLLM_CHECK(out.numel() == in.numel() * size(), "all_gather: the output must hold size() inputs");
  all_gather(in.data_as<float>(), in.numel(), out.data_as<float>());
}

}  // namespace actorllm
