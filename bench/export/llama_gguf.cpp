#include "bench/export/llama_gguf.hpp"

#include "bench/export/sentencepiece_model.hpp"
#include "kernels/dtype.hpp"
#include "model/model_config.hpp"
#include "model/safetensors.hpp"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <vector>

namespace actorllm::bench {

namespace {

// llama.cpp's general.file_type values (llama.h's llama_ftype) for the float files this writes.
constexpr uint32_t ftype_all_f32 = 0, ftype_mostly_f16 = 1, ftype_mostly_bf16 = 32;

std::runtime_error error(const std::filesystem::path& where, const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", where.string(), what));
}

/// The element type of a float tensor, or an error naming it.
ggml_type ggml_type_of(const model::tensor_info& info, const std::filesystem::path& file) {
  switch (info.stored) {
    case model::stored_type::f32:
      return ggml_type::f32;
    case model::stored_type::f16:
      return ggml_type::f16;
    case model::stored_type::bf16:
      return ggml_type::bf16;
    default:
      throw error(file, fmt::format("tensor '{}' is {}; the GGUF writer copies F32, F16 and BF16 tensors only",
                                    info.name, model::stored_type_name(info.stored)));
  }
}

/// Refuses what llama.cpp's Llama graph would compute differently from the Hugging Face model.
void check_supported(const model::model_config& cfg, const std::filesystem::path& config_file) {
  if (cfg.model_type != "llama")
    throw error(config_file, fmt::format("model_type '{}': the GGUF writer handles Llama (model_type 'llama') only",
                                         cfg.model_type));
  if (cfg.attention_bias || cfg.o_proj_bias)
    throw error(config_file,
                "attention_bias: true is not supported by the GGUF writer (llama.cpp's bias tensors "
                "are not written)");
  if (cfg.qk_norm)
    throw error(config_file, "q/k norms are not supported by the GGUF writer");
  if (cfg.n_expert > 0)
    throw error(config_file, "experts are not supported by the GGUF writer (dense Llama only)");
  if (cfg.rope.type != rope_scaling::kind::none)
    throw error(config_file, "rope_scaling: only null (no scaling) is supported by the GGUF writer");
  if (cfg.head_dim % 2 != 0)
    throw error(config_file, fmt::format("head_dim {} is odd: the rotary row permutation needs pairs", cfg.head_dim));
}

/// One weight to write: where its bytes are, its GGUF name, its expected Hugging Face shape, and the head count of
/// its rotary permutation (0: none).
struct planned_tensor {
  std::string hf_name;
  std::string gguf_name;
  std::vector<int64_t> shape;
  int64_t rope_heads = 0;
};

std::vector<planned_tensor> plan_tensors(const model::model_config& cfg) {
  const int64_t q_rows = cfg.n_head * cfg.head_dim, kv_rows = cfg.n_head_kv * cfg.head_dim;
  std::vector<planned_tensor> plan;
  auto add = [&](std::string hf, std::vector<int64_t> shape, int64_t rope_heads = 0) {
    plan.push_back({hf, llama_gguf_tensor_name(hf), std::move(shape), rope_heads});
  };
  add("model.embed_tokens.weight", {cfg.n_vocab, cfg.n_embd});
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {cfg.n_embd});
    add(p + "self_attn.q_proj.weight", {q_rows, cfg.n_embd}, cfg.n_head);
    add(p + "self_attn.k_proj.weight", {kv_rows, cfg.n_embd}, cfg.n_head_kv);
    add(p + "self_attn.v_proj.weight", {kv_rows, cfg.n_embd});
    add(p + "self_attn.o_proj.weight", {cfg.n_embd, q_rows});
    add(p + "post_attention_layernorm.weight", {cfg.n_embd});
    add(p + "mlp.gate_proj.weight", {cfg.n_ff, cfg.n_embd});
    add(p + "mlp.up_proj.weight", {cfg.n_ff, cfg.n_embd});
    add(p + "mlp.down_proj.weight", {cfg.n_embd, cfg.n_ff});
  }
  add("model.norm.weight", {cfg.n_embd});
  if (!cfg.tie_word_embeddings)  // tied: llama.cpp reads token_embd as the output matrix when output is absent
    add("lm_head.weight", {cfg.n_vocab, cfg.n_embd});
  return plan;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The vocabulary keys (tokenizer.ggml.*) of a SentencePiece model for a `n_vocab`-row embedding.
size_t add_vocabulary(gguf_writer& gguf, const model::model_config& cfg, const std::filesystem::path& tokenizer_model,
                      const std::filesystem::path& config_file) {
  std::vector<sentencepiece_piece> pieces = read_sentencepiece_model(tokenizer_model);
  const auto n_vocab = static_cast<size_t>(cfg.n_vocab);
  if (pieces.size() > n_vocab)
    throw error(tokenizer_model, fmt::format("{} pieces, more than the model's vocab_size {} ({})", pieces.size(),
                                             n_vocab, config_file.string()));
  // Rows of the embedding beyond the tokenizer's pieces get placeholder tokens, as llama.cpp's converter pads them.
  for (size_t id = pieces.size(); id < n_vocab; ++id)
    pieces.push_back({fmt::format("[PAD{}]", id), 0.0f, piece_type::user_defined});
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::optional<uint32_t> unk;
  for (size_t id = 0; id < pieces.size(); ++id) {
    texts.push_back(pieces[id].text);
    scores.push_back(pieces[id].score);
    types.push_back(static_cast<int32_t>(pieces[id].type));
    if (!unk && pieces[id].type == piece_type::unknown)
      unk = static_cast<uint32_t>(id);
  }
  gguf.add_string("tokenizer.ggml.model", "llama");
  gguf.add_string_array("tokenizer.ggml.tokens", texts);
  gguf.add_f32_array("tokenizer.ggml.scores", scores);
  gguf.add_i32_array("tokenizer.ggml.token_type", types);
  auto special = [&](const char* key, const char* field, int64_t id) {
    if (id < 0 || id >= cfg.n_vocab)
      throw error(config_file, fmt::format("{} {} is outside the vocabulary of {}", field, id, cfg.n_vocab));
    gguf.add_u32(key, static_cast<uint32_t>(id));
  };
  if (cfg.bos_token_id)
    special("tokenizer.ggml.bos_token_id", "bos_token_id", *cfg.bos_token_id);
  if (!cfg.eos_token_ids.empty())
    special("tokenizer.ggml.eos_token_id", "eos_token_id", cfg.eos_token_ids.front());
  if (unk)
    gguf.add_u32("tokenizer.ggml.unknown_token_id", *unk);
  gguf.add_bool("tokenizer.ggml.add_bos_token", cfg.bos_token_id.has_value());
  gguf.add_bool("tokenizer.ggml.add_eos_token", false);
  return pieces.size();
}

}  // namespace

void permute_rope_rows(const std::byte* src, std::byte* dst, int64_t n_rows, size_t row_bytes, int64_t n_head) {
  if (n_head <= 0 || n_rows % (2 * n_head) != 0)
    throw std::invalid_argument(
        fmt::format("rotary permutation: {} rows do not split into {} heads of pairs", n_rows, n_head));
  const int64_t head_dim = n_rows / n_head, half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * head_dim + 2 * i + j, from = h * head_dim + j * half + i;
        std::copy_n(src + from * static_cast<int64_t>(row_bytes), row_bytes,
                    dst + to * static_cast<int64_t>(row_bytes));
      }
}

std::string llama_gguf_tensor_name(const std::string& hf_name) {
  static const std::map<std::string, std::string> global{{"model.embed_tokens.weight", "token_embd.weight"},
                                                         {"model.norm.weight", "output_norm.weight"},
                                                         {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> per_layer{
      {"input_layernorm.weight", "attn_norm.weight"},    {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (auto it = global.find(hf_name); it != global.end())
    return it->second;
  static const std::regex layer_name{R"(model\.layers\.(\d+)\.(.+))"};
  std::smatch m;
  if (std::regex_match(hf_name, m, layer_name))
    if (auto it = per_layer.find(m[2].str()); it != per_layer.end())
      return fmt::format("blk.{}.{}", m[1].str(), it->second);
  return "";
}

llama_gguf_summary write_llama_gguf(const std::filesystem::path& hf_dir, const std::filesystem::path& tokenizer_model,
                                    const std::filesystem::path& out) {
  const std::filesystem::path config_file = hf_dir / "config.json";
  const model::model_config cfg = model::load_model_config(hf_dir);
  check_supported(cfg, config_file);
  const model::safetensors_checkpoint ckpt = model::safetensors_checkpoint::open(hf_dir);

  const std::vector<planned_tensor> plan = plan_tensors(cfg);
  std::map<std::string, const planned_tensor*> planned;
  for (const planned_tensor& t : plan)
    planned[t.hf_name] = &t;
  for (const std::string& name : ckpt.names())
    if (!planned.count(name) && !ends_with(name, ".rotary_emb.inv_freq"))  // inv_freq is recomputed from rope_theta
      throw error(ckpt.find(name)->file->path(),
                  fmt::format("tensor '{}' has no place in llama.cpp's Llama{}", name,
                              name == "lm_head.weight" ? " (tie_word_embeddings is true)" : ""));

  gguf_writer gguf;
  gguf.add_string("general.architecture", "llama");
  gguf.add_string("general.name", std::filesystem::absolute(hf_dir).lexically_normal().filename().string());
  llama_gguf_summary summary;
  auto u32 = [&](const char* field, int64_t v) {
    if (v <= 0 || v > UINT32_MAX)
      throw error(config_file, fmt::format("{} {} does not fit GGUF's u32", field, v));
    return static_cast<uint32_t>(v);
  };
  gguf.add_u32("llama.context_length", u32("max_position_embeddings", cfg.max_position_embeddings));
  gguf.add_u32("llama.embedding_length", u32("hidden_size", cfg.n_embd));
  gguf.add_u32("llama.block_count", u32("num_hidden_layers", cfg.n_layer));
  gguf.add_u32("llama.feed_forward_length", u32("intermediate_size", cfg.n_ff));
  gguf.add_u32("llama.attention.head_count", u32("num_attention_heads", cfg.n_head));
  gguf.add_u32("llama.attention.head_count_kv", u32("num_key_value_heads", cfg.n_head_kv));
  gguf.add_f32("llama.rope.freq_base", static_cast<float>(cfg.rope_theta));
  gguf.add_f32("llama.attention.layer_norm_rms_epsilon", cfg.rms_norm_eps);
  gguf.add_u32("llama.rope.dimension_count", u32("head_dim", cfg.head_dim));
  gguf.add_u32("llama.vocab_size", u32("vocab_size", cfg.n_vocab));
  if (cfg.head_dim * cfg.n_head != cfg.n_embd) {  // llama.cpp assumes n_embd / n_head unless told
    gguf.add_u32("llama.attention.key_length", u32("head_dim", cfg.head_dim));
    gguf.add_u32("llama.attention.value_length", u32("head_dim", cfg.head_dim));
  }

  for (const planned_tensor& t : plan) {
    const auto found = ckpt.find(t.hf_name);
    if (!found)
      throw error(hf_dir, fmt::format("tensor '{}' is missing", t.hf_name));
    const model::tensor_info& info = *found->info;
    const std::filesystem::path& file = found->file->path();
    if (info.shape != t.shape)
      throw error(file, fmt::format("tensor '{}' has shape [{}], config.json implies [{}]", t.hf_name,
                                    fmt::join(info.shape, ", "), fmt::join(t.shape, ", ")));
    const ggml_type type = ggml_type_of(info, file);
    if (t.hf_name == "model.layers.0.self_attn.q_proj.weight")  // the matrices' type names the file's, as llama.cpp's
      summary.file_type = type == ggml_type::bf16  ? ftype_mostly_bf16
                          : type == ggml_type::f16 ? ftype_mostly_f16
                                                   : ftype_all_f32;
    std::vector<int64_t> ne(info.shape.rbegin(), info.shape.rend());  // ggml lists the contiguous dimension first
    const std::byte* bytes = found->file->data(info);
    const uint64_t nbytes = info.nbytes();
    const int64_t rope_heads = t.rope_heads, n_rows = info.shape[0];
    if (info.shape.size() == 1 && type != ggml_type::f32) {
      // ggml's CPU ops take 1-D weights (the norms) in F32 only, so llama.cpp's converter always writes them F32; a
      // 16-bit value widens to F32 exactly, so both engines still multiply by the same numbers.
      const dtype from = type == ggml_type::bf16 ? dtype::bf16 : dtype::f16;
      gguf.add_tensor(t.gguf_name, ggml_type::f32, std::move(ne), [bytes, n = info.shape[0], from](std::ostream& os) {
        std::vector<float> widened(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, bytes + 2 * i, 2);
          widened[static_cast<size_t>(i)] = from == dtype::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
        os.write(reinterpret_cast<const char*>(widened.data()), static_cast<std::streamsize>(4 * n));
      });
      ++summary.n_tensors;
      summary.tensor_bytes += static_cast<uint64_t>(4 * info.shape[0]);
      continue;
    }
    gguf.add_tensor(t.gguf_name, type, std::move(ne), [bytes, nbytes, rope_heads, n_rows](std::ostream& os) {
      if (rope_heads == 0) {
        os.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(nbytes));
        return;
      }
      std::vector<std::byte> permuted(nbytes);
      permute_rope_rows(bytes, permuted.data(), n_rows, nbytes / static_cast<uint64_t>(n_rows), rope_heads);
      os.write(reinterpret_cast<const char*>(permuted.data()), static_cast<std::streamsize>(nbytes));
    });
    summary.tensor_bytes += nbytes;
    ++summary.n_tensors;
  }
  gguf.add_u32("general.file_type", summary.file_type);
  summary.n_vocab = add_vocabulary(gguf, cfg, tokenizer_model, config_file);
  gguf.write(out);
  return summary;
}

}  // namespace actorllm::bench
