// Device tensors through host memory.
#include "comm/host_staged_collective.hpp"

#include "util/check.hpp"

namespace actorllm {

host_staged_collective::host_staged_collective(std::unique_ptr<tp_collective> inner, backend& be)
    : inner_(std::move(inner)), be_(be) {
  ACTORLLM_CHECK(inner_ != nullptr, "host_staged_collective: no inner collective");
}

void host_staged_collective::all_reduce_sum(const tensor& t) {
  ACTORLLM_CHECK(t.type == dtype::f32, "all_reduce_sum: the tensor must be f32");
  if (size() == 1)
    return;  // the sum over one rank: nothing to move
  if (t.where().kind == device_kind::cpu) {
    inner_->all_reduce_sum(t);
    return;
  }
  in_.resize(static_cast<size_t>(t.numel()));
  be_.download(t, in_.data(), t.nbytes());
  inner_->all_reduce_sum(in_.data(), t.numel());
  be_.upload(t, in_.data(), t.nbytes());
}

void host_staged_collective::all_gather(const tensor& in, const tensor& out) {
  ACTORLLM_CHECK(in.type == dtype::f32 && out.type == dtype::f32, "all_gather: the tensors must be f32");
  ACTORLLM_CHECK(out.numel() == in.numel() * size(), "all_gather: the output must hold size() inputs");
  if (size() == 1) {
    be_.copy(in, out.reshape(in.shape));
    return;
  }
  if (in.where().kind == device_kind::cpu && out.where().kind == device_kind::cpu) {
    inner_->all_gather(in, out);
    return;
  }
  in_.resize(static_cast<size_t>(in.numel()));
  out_.resize(static_cast<size_t>(out.numel()));
  be_.download(in, in_.data(), in.nbytes());
  inner_->all_gather(in_.data(), in.numel(), out_.data());
  be_.upload(out, out_.data(), out.nbytes());
}

}  // namespace actorllm
