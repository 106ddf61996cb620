// host_tensor's deferred copies: made once, when first read (here or through the backend tensor made from one), and
// then owned like any copy.
#include "model/tensor.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using namespace actorllm;
using model::host_tensor;

namespace {

struct counted_fill {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  void operator()(void* dst) const {
    ++*calls;
    auto* v = static_cast<uint16_t*>(dst);
    for (int i = 0; i < 6; ++i)
      v[i] = static_cast<uint16_t>(100 + i);
  }
};

file_origin some_place() {
  file_origin o;
  o.device = 1;
  o.inode = 2;
  o.offset = 4096;
  o.row_stride = 64;
  o.path = "/models/m/model.safetensors";
  return o;
}

}  // namespace

TEST_CASE("host_tensor::deferred: copied once, when first read, and what it read is let go then [asan]") {
  counted_fill fill;
  auto source = std::make_shared<int>(7);
  const std::weak_ptr<int> watch = source;
  host_tensor h = host_tensor::deferred(dtype::bf16, {2, 3}, fill, std::move(source), some_place());
  CHECK(h.is_deferred());
  CHECK_FALSE(h.is_view());
  CHECK(h.nbytes() == 12);
  CHECK(*fill.calls == 0);
  CHECK_FALSE(watch.expired());  // kept for the copy
  const host_tensor& read = h;
  const auto* v = static_cast<const uint16_t*>(read.data());
  CHECK(v[0] == 100);
  CHECK(v[5] == 105);
  CHECK(read.data() == v);
  CHECK(*fill.calls == 1);
  CHECK_FALSE(h.is_deferred());
  CHECK(watch.expired());
}

TEST_CASE(
    "host_tensor::deferred: the backend tensor made from one names its place, and copies on its first read "
    "[asan]") {
  counted_fill fill;
  host_tensor h = host_tensor::deferred(dtype::bf16, {2, 3}, fill, std::make_shared<int>(1), some_place());
  const tensor t = std::move(h).into_tensor();
  CHECK(t.buf->origin() == some_place());
  CHECK(t.buf->size() == 12);
  CHECK(*fill.calls == 0);
  // Two readers at once: one copy.
  std::vector<const void*> seen(2);
  std::thread a([&] { seen[0] = t.buf->data(); });
  std::thread b([&] { seen[1] = t.buf->data(); });
  a.join();
  b.join();
  CHECK(seen[0] == seen[1]);
  CHECK(*fill.calls == 1);
  CHECK(static_cast<const uint16_t*>(t.data())[2] == 102);
}

TEST_CASE(
    "host_tensor::deferred: writing to one makes the copy, owned from then on, no longer named by the file "
    "[asan]") {
  counted_fill fill;
  host_tensor h = host_tensor::deferred(dtype::bf16, {2, 3}, fill, std::make_shared<int>(1), some_place());
  auto* v = static_cast<uint16_t*>(h.data());
  CHECK(*fill.calls == 1);
  CHECK(v[1] == 101);
  v[1] = 7;
  CHECK(static_cast<const uint16_t*>(std::as_const(h).data())[1] == 7);
  CHECK_FALSE(h.is_deferred());
  const tensor t = std::move(h).into_tensor();
  CHECK_FALSE(t.buf->origin().has_value());  // its bytes are its own now
  CHECK(static_cast<const uint16_t*>(t.data())[1] == 7);
  CHECK(*fill.calls == 1);
}
