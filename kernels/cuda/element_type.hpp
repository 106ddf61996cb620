// The element types device kernels read weights in. A C++17 header (the .cu files are compiled as C++17), mapped
// from kernels/dtype.hpp's dtype by the backend.
#pragma once

#include <cstdint>

namespace actorllm::cuda {

/// A floating-point element type of a weight or an activation buffer.
enum class element_type : uint8_t { f32, f16, bf16 };

/// Bytes per element.
constexpr int element_size(element_type t) { return t == element_type::f32 ? 4 : 2; }

}  // namespace actorllm::cuda
