// Where a shard's slice lies inside the full row-major tensor, and how to cut the copy of it into chunks that
// threads can share. Used by the checkpoint loader and the dummy-weight filler so both slice the same way.
#pragma once

#include "model/weight_table.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace actorllm::model {

/// A slice along dimension d of a row-major tensor seen as [outer, full_dim, inner]: for each of the `outer`
/// blocks it is one contiguous run of run() elements.
struct slice_layout {
  int64_t outer = 1;
  int64_t full_dim = 1;
  int64_t inner = 1;
  int64_t begin = 0;
  int64_t end = 1;

  /// Elements per contiguous run.
  int64_t run() const { return (end - begin) * inner; }
  /// Full-tensor index of element j of run o.
  int64_t full_index(int64_t o, int64_t j) const { return (o * full_dim + begin) * inner + j; }
  /// Slice index of element j of run o.
  int64_t slice_index(int64_t o, int64_t j) const { return o * run() + j; }
};

/// The layout of `slice` inside a full tensor of `full_shape`.
slice_layout make_slice_layout(const std::vector<int64_t>& full_shape, const tensor_slice& slice);

/// A piece of work: runs [outer_begin, outer_end), elements [run_begin, run_end) of each, of tensor `tensor`.
struct slice_chunk {
  size_t tensor = 0;
  int64_t outer_begin = 0;
  int64_t outer_end = 0;
  int64_t run_begin = 0;
  int64_t run_end = 0;
};

/// Appends chunks of roughly `target_elements` elements covering all of `layout` (nothing for an empty slice).
void append_chunks(size_t tensor, const slice_layout& layout, int64_t target_elements,
                   std::vector<slice_chunk>& chunks);

/// Calls fn(i) for i in [0, n) on up to hardware_concurrency threads; rethrows the first exception once all are done.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);

}  // namespace actorllm::model
