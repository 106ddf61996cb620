# NCCL for the communicator of comm/cuda (included by the top CMakeLists.txt when the CUDA backend is built).
# NCCL: in the CUDA toolkit's directories here; on a GPU machine perhaps in PyTorch's nvidia-nccl wheel (NCCL_HOME or
# NCCL_ROOT pointing at it). Without it the NCCL communicator is left out and asking for it is refused by name
# (comm/device_communicator.cpp).
find_path(ACTORLLM_NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(ACTORLLM_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ENV NCCL_HOME ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
set(_nccl_found OFF)
if(ACTORLLM_NCCL_INCLUDE_DIR AND ACTORLLM_NCCL_LIBRARY)
  set(_nccl_found ON)
endif()
option(ACTORLLM_NCCL "Build the NCCL communicator (comm/cuda/nccl_collective)" ${_nccl_found})
if(ACTORLLM_NCCL AND NOT _nccl_found)
  message(FATAL_ERROR "ACTORLLM_NCCL is ON but nccl.h or libnccl was not found (set NCCL_HOME)")
endif()
message(STATUS "NCCL communicator: ${ACTORLLM_NCCL} (${ACTORLLM_NCCL_LIBRARY})")

# ptxas's checks for every CUDA source: a spill to local memory, or any other use of it (a stack frame: an array
# indexed at run time, a library routine's table), fails the build. Hot loops that touch local memory lose much of
# their bandwidth, and a kernel that fits its registers today keeps fitting them only while someone checks.
# tests/CMakeLists.txt compiles a kernel that must trip them with these same flags.
set(ACTORLLM_CUDA_PTXAS_CHECKS -Xptxas=--warn-on-spills -Xptxas=--warn-on-local-memory-usage -Xptxas=--warning-as-error
    CACHE INTERNAL "ptxas flags that refuse local memory")

# Compile options of every target with CUDA sources (kernels/cuda, comm/cuda).
function(actorllm_cuda_target_options target)
  # -v (ACTORLLM_CUDA_PTXAS_VERBOSE) prints each kernel's registers and shared memory into the build log.
  target_compile_options(
    ${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall ${ACTORLLM_CUDA_PTXAS_CHECKS}>
                      $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow>)
  if(ACTORLLM_CUDA_PTXAS_VERBOSE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
endfunction()
