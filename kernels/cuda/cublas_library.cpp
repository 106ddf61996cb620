// cuBLAS opened on first use (see cublas_library.hpp).
#include "kernels/cuda/cublas_library.hpp"

#include "kernels/cuda/cuda_check.hpp"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>

#include <dlfcn.h>

namespace actorllm::cuda {

namespace {

std::atomic<bool> opened{false};

template <class Fn>
void resolve(void* library, const char* library_name, const char* symbol, Fn& out) {
  void* p = ::dlsym(library, symbol);
  if (p == nullptr)
    throw cuda_error(fmt::format("{} has no {} (a cuBLAS older than this build's?)", library_name, symbol));
  out = reinterpret_cast<Fn>(p);
}

cublas_library open_cublas() {
  // Its soname as the loader finds it (LD_LIBRARY_PATH, the binary's run path, the system's), so a machine's own
  // cuBLAS of this major version serves; else the very file the build linked against.
  std::string name = ACTORLLM_CUBLAS_SONAME;
  void* library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    name = ACTORLLM_CUBLAS_LIBRARY;
    library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw cuda_error(fmt::format("cannot open cuBLAS ({} or {}): {}", ACTORLLM_CUBLAS_SONAME, ACTORLLM_CUBLAS_LIBRARY,
                                 why != nullptr ? why : "unknown error"));
  }
  cublas_library l;
  resolve(library, name.c_str(), "cublasCreate_v2", l.create);
  resolve(library, name.c_str(), "cublasDestroy_v2", l.destroy);
  resolve(library, name.c_str(), "cublasSetStream_v2", l.set_stream);
  resolve(library, name.c_str(), "cublasSetMathMode", l.set_math_mode);
  resolve(library, name.c_str(), "cublasSetWorkspace_v2", l.set_workspace);
  resolve(library, name.c_str(), "cublasSgemm_v2", l.sgemm);
  resolve(library, name.c_str(), "cublasGemmEx", l.gemm_ex);
  opened.store(true);
  return l;  // the library stays open for the process's life
}

}  // namespace

const cublas_library& cublas() {
  static const cublas_library library = open_cublas();  // a throw leaves it to be tried again
  return library;
}

bool cublas_opened() { return opened.load(); }

}  // namespace actorllm::cuda
