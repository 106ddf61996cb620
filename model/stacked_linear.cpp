// Stacking Linear weights of one input by output rows at load time.
#include "model/stacked_linear.hpp"

#include "kernels/backend.hpp"
#include "model/model_error.hpp"
#include "util/fast_digest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace actorllm::model {

std::vector<tensor> stacked_linear::weight_tensors() const {
  if (is_merged())
    return {merged};
  return {parts.begin(), parts.begin() + n_parts};
}

std::string stack_refusal(const std::vector<stack_part>& parts) {
  const stack_part& first = parts.front();
  for (const stack_part& p : parts) {
    if ((p.quantized != nullptr) != (first.quantized != nullptr))
      return fmt::format("{} is {} but {} is not", (p.quantized ? p : first).name, "quantized",
                         (p.quantized ? first : p).name);
    if (p.quantized == nullptr) {
      if (p.dense->shape.size() != 2 || p.dense->shape[1] != first.dense->shape[1])
        return fmt::format("{} and {} differ in input width", first.name, p.name);
      continue;
    }
    const quantized_linear& a = *first.quantized;
    const quantized_linear& b = *p.quantized;
    if (a.bits != b.bits || a.group_size != b.group_size || a.n_in != b.n_in || a.activations != b.activations)
      return fmt::format("{} ({}) and {} ({}) are quantized differently", first.name, a.describe(), p.name,
                         b.describe());
  }
  return {};
}

host_tensor stack_dense_rows(const std::vector<stack_part>& parts) {
  const dtype first = parts.front().dense->type;
  bool same_type = true;
  int64_t rows = 0;
  for (const stack_part& p : parts) {
    same_type = same_type && p.dense->type == first;
    rows += p.dense->shape[0];
  }
  const int64_t n_in = parts.front().dense->shape[1];
  host_tensor out(same_type ? first : dtype::f32, {rows, n_in});
  auto* dst = static_cast<std::byte*>(out.data());
  for (const stack_part& p : parts) {
    const host_tensor& h = *p.dense;
    if (h.type == out.type) {
      std::memcpy(dst, h.data(), h.nbytes());
    } else {  // a checkpoint mixing dtypes within q/k/v: widened exactly
      for (int64_t i = 0; i < h.numel(); ++i)
        reinterpret_cast<float*>(dst)[i] = load_as_f32(h.data(), h.type, static_cast<size_t>(i));
    }
    dst += static_cast<size_t>(h.numel()) * dtype_size(out.type);
  }
  return out;
}

namespace {

// Appends q's rows (codes, scales, zero points) to out's.
void append_rows(quantized_linear& out, const quantized_linear& q) {
  out.codes.insert(out.codes.end(), q.codes.begin(), q.codes.end());
  out.scales.insert(out.scales.end(), q.scales.begin(), q.scales.end());
  out.zeros.insert(out.zeros.end(), q.zeros.begin(), q.zeros.end());
}

}  // namespace

quantized_linear stack_quantized_rows(const std::vector<stack_part>& parts) {
  quantized_linear out;
  const quantized_linear& first = *parts.front().quantized;
  out.bits = first.bits;
  out.n_in = first.n_in;
  out.group_size = first.group_size;
  out.activations = first.activations;
  const bool unread = std::all_of(parts.begin(), parts.end(), [](const stack_part& p) {
    return p.quantized->unread && p.quantized->origin.has_value();
  });
  if (unread) {
    util::fast_digest name;
    name.add(parts.size());
    std::vector<quantized_linear> pieces;
    for (const stack_part& p : parts) {
      quantized_linear& q = *p.quantized;
      out.n_out += q.n_out;
      name.add(static_cast<uint64_t>(q.n_out));
      name.add(q.origin->lo);
      name.add(q.origin->hi);
      for (const file_origin& f : q.origin_files)
        if (std::find(out.origin_files.begin(), out.origin_files.end(), f) == out.origin_files.end())
          out.origin_files.push_back(f);
      pieces.push_back(std::move(q));
      q = quantized_linear{};
    }
    out.origin = name.value();
    out.unread = [pieces = std::move(pieces)](quantized_linear& w) mutable {
      for (quantized_linear& piece : pieces) {
        piece.read();
        append_rows(w, piece);
        piece = quantized_linear{};
      }
    };
    return out;
  }
  for (const stack_part& p : parts) {
    quantized_linear& q = *p.quantized;
    q.read();
    out.n_out += q.n_out;
    // Row-major [n_out, ...] each: the rows of one part follow the previous part's.
    append_rows(out, q);
    q = quantized_linear{};
  }
  out.validate();
  return out;
}

namespace {

int64_t rows_of(const stack_part& p) { return p.quantized ? p.quantized->n_out : p.dense->shape.at(0); }
int64_t inputs_of(const stack_part& p) { return p.quantized ? p.quantized->n_in : p.dense->shape.at(1); }

tensor bind_dense(host_tensor h, bool linear, backend& be, size_t& bytes) {
  bytes += h.nbytes();
  return linear ? be.import_linear_weight(std::move(h).into_tensor()) : be.import_host(std::move(h).into_tensor());
}

bool one_dtype(const std::vector<stack_part>& parts) {
  return std::all_of(parts.begin(), parts.end(),
                     [&](const stack_part& p) { return p.dense->type == parts.front().dense->type; });
}

// Dense Linear parts of one dtype as the backend wants them (backend::stacks_linear_parts): one weight, each part
// handed to the backend as it is (it may lay each part out in its place, with no stacked copy of the rows first), or
// each part imported apart into out.parts. The parts are left without data; their biases are bound by the caller.
void bind_dense_linear_parts(const std::vector<stack_part>& parts, backend& be, size_t& bytes, stacked_linear& out) {
  std::vector<tensor> hosts;
  hosts.reserve(parts.size());
  for (const stack_part& p : parts) {
    bytes += p.dense->nbytes();
    hosts.push_back(std::move(*p.dense).into_tensor());
  }
  if (be.stacks_linear_parts(hosts)) {
    out.merged = be.import_stacked_linear_weight(hosts);
    return;
  }
  for (size_t i = 0; i < hosts.size(); ++i)
    out.parts[i] = be.import_linear_weight(std::move(hosts[i]));
}

}  // namespace

tensor bind_quantized_linear(quantized_linear& q, backend& be, size_t& bytes) {
  bytes += q.packed_bytes();
  if (tensor held = be.find_quantized_linear(q); held.buf != nullptr)
    return held;
  q.read();
  return be.import_quantized_linear(q);
}

stacked_linear bind_stacked_linear(std::vector<stack_part> parts, bool linear, backend& be, size_t& bytes) {
  if (parts.empty() || parts.size() > stacked_linear::max_parts)
    throw model_error(
        fmt::format("a stacked Linear has 1 to {} parts, not {}", stacked_linear::max_parts, parts.size()));
  stacked_linear out;
  out.n_parts = static_cast<int>(parts.size());
  out.n_in = inputs_of(parts.front());
  const bool with_bias = parts.front().bias != nullptr;
  for (size_t i = 0; i < parts.size(); ++i) {
    out.rows[i] = rows_of(parts[i]);
    if ((parts[i].bias != nullptr) != with_bias)
      throw model_error(fmt::format("{} and {}: one has a bias, the other not", parts.front().name, parts[i].name));
    if (with_bias && parts[i].bias->numel() != out.rows[i])
      throw model_error(
          fmt::format("{}: its bias has {} values for {} rows", parts[i].name, parts[i].bias->numel(), out.rows[i]));
  }
  if (stack_refusal(parts).empty()) {
    if (parts.front().quantized) {
      quantized_linear stacked = stack_quantized_rows(parts);
      out.merged = bind_quantized_linear(stacked, be, bytes);
    } else if (linear && one_dtype(parts)) {
      bind_dense_linear_parts(parts, be, bytes, out);
    } else {
      out.merged = bind_dense(stack_dense_rows(parts), linear, be, bytes);
    }
    if (with_bias && !out.is_merged()) {  // bound apart by the backend's choice: each part's bias with it
      for (size_t i = 0; i < parts.size(); ++i) {
        bytes += parts[i].bias->nbytes();
        out.part_biases[i] = be.import_host(std::move(*parts[i].bias).into_tensor());
      }
    } else if (with_bias) {
      std::vector<stack_part> biases;
      for (const stack_part& p : parts) {
        host_tensor& b = *p.bias;
        biases.push_back({p.name, &b, nullptr, nullptr});
        b.shape = {b.numel(), 1};  // a column of rows, so the bias stacks like a weight
      }
      host_tensor b = stack_dense_rows(biases);
      b.shape = {out.total_rows()};
      bytes += b.nbytes();
      out.bias = be.import_host(std::move(b).into_tensor());
    }
    return out;
  }
  // Apart: each part's own weight (and bias), run as one matmul_group.
  for (size_t i = 0; i < parts.size(); ++i) {
    out.parts[i] = parts[i].quantized ? bind_quantized_linear(*parts[i].quantized, be, bytes)
                                      : bind_dense(std::move(*parts[i].dense), linear, be, bytes);
    if (parts[i].quantized)
      *parts[i].quantized = quantized_linear{};
    if (with_bias) {
      bytes += parts[i].bias->nbytes();
      out.part_biases[i] = be.import_host(std::move(*parts[i].bias).into_tensor());
    }
  }
  return out;
}

}  // namespace actorllm::model
