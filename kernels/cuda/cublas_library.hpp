// cuBLAS, opened when the first CUDA backend starts rather than with the program. Linked as a dependency, libcublas
// and the libcublasLt it needs run their initialisers at every start of the binary: 0.35 s of the 0.42 s `actorllm
// --version` took on a 2-vCPU VM, a CPU-only run included. The backend calls the few functions it uses through here.
#pragma once

#include <cublas_v2.h>

namespace actorllm::cuda {

/// The cuBLAS functions the CUDA backend calls (cublas_v2.h's names map to these symbols).
struct cublas_library {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;
  // The exported cublasGemmEx (a cublasComputeType_t compute type); the header's C++ overload taking a cudaDataType
  // is an inline wrapper, so decltype cannot name it.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

/// cuBLAS, opened on first use (its soname on the loader's path, else the file the build compiled against) with
/// every function resolved; throws cuda_error naming the library, or the missing function, when it cannot.
const cublas_library& cublas();

/// Whether this process has opened cuBLAS (a CPU-only run never does).
bool cublas_opened();

}  // namespace actorllm::cuda
