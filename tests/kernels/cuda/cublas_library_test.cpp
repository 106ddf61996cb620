// cuBLAS is opened on first use, not linked: it opens here without a GPU and resolves every function the backend
// calls (tests/apps/binary_start_test.cpp checks that the binary does not need it at start).
#include "kernels/cuda/cublas_library.hpp"

#include <doctest/doctest.h>

using namespace actorllm;

TEST_CASE("cuBLAS opens on first use and resolves every function the CUDA backend calls (no GPU needed)") {
  const cuda::cublas_library& l = cuda::cublas();
  CHECK(cuda::cublas_opened());
  CHECK(static_cast<bool>(l.create));
  CHECK(static_cast<bool>(l.destroy));
  CHECK(static_cast<bool>(l.set_stream));
  CHECK(static_cast<bool>(l.set_math_mode));
  CHECK(static_cast<bool>(l.set_workspace));
  CHECK(static_cast<bool>(l.sgemm));
  CHECK(static_cast<bool>(l.gemm_ex));
  CHECK(&cuda::cublas() == &l);  // opened once
}
