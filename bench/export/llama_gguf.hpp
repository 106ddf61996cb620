// A Hugging Face Llama checkpoint (config.json + safetensors) written as a GGUF file that llama.cpp loads, with the
// same tensor bytes: the benchmark against llama.cpp (bench/compare_llama_cpp.sh) runs both engines on one set of
// weights. What llama.cpp's own converter (convert_hf_to_gguf.py) would write for such a model: the llama.* hyper-
// parameters, its tensor names, q_proj/k_proj rows permuted for ggml's rotary layout, and the SentencePiece vocabulary
// of a tokenizer.model. No matrix element is converted: BF16 stays BF16, F16 F16, F32 F32; 1-D weights (the norms)
// are written F32, as llama.cpp's converter writes them (ggml's CPU ops take no other), widened exactly.
#pragma once

#include "bench/export/gguf_writer.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace actorllm::bench {

/// What write_llama_gguf wrote.
struct llama_gguf_summary {
  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;  ///< the tensors' bytes as written, without header and padding
  uint32_t file_type = 0;     ///< general.file_type: 0 all F32, 1 mostly F16, 32 mostly BF16
  size_t n_vocab = 0;
};

/// Reorders the rows of a q_proj or k_proj weight (`n_rows` rows of `row_bytes` bytes, `n_head` heads of
/// n_rows / n_head rows) from Hugging Face's rotary layout, where a head's first half of rows pairs with its second
/// half, to ggml's, where rows 2i and 2i+1 pair: within each head, destination row 2i + j is source row
/// j * (head_dim / 2) + i. `dst` and `src` must not overlap; n_rows must be a multiple of 2 × n_head.
void permute_rope_rows(const std::byte* src, std::byte* dst, int64_t n_rows, size_t row_bytes, int64_t n_head);

/// The GGUF tensor name of a Hugging Face Llama weight ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight"),
/// or "" for a name llama.cpp's Llama has no tensor for.
std::string llama_gguf_tensor_name(const std::string& hf_name);

/// Writes `out` from the checkpoint in `hf_dir` (config.json and model.safetensors or an index and its shards) and
/// the SentencePiece `tokenizer_model`. Throws std::runtime_error (model::model_error for the checkpoint's own
/// errors) naming the file and the field or tensor: an architecture other than Llama (model_type "llama"), a setting
/// llama.cpp's Llama would compute differently (attention or o_proj bias, rope_scaling, q/k norms, experts), a
/// missing, unexpected or misshapen tensor, a dtype other than F32/F16/BF16, a vocabulary larger than vocab_size or
/// special ids outside it.
llama_gguf_summary write_llama_gguf(const std::filesystem::path& hf_dir, const std::filesystem::path& tokenizer_model,
                                    const std::filesystem::path& out);

}  // namespace actorllm::bench
