// The vocabulary of a SentencePiece tokenizer.model (a serialized sentencepiece.ModelProto): each piece's text, score
// and type, in id order. Only what a GGUF "llama" vocabulary carries is read; the trainer and normalizer settings are
// skipped. The protobuf wire format is decoded here by hand (it is four field kinds), so no protobuf dependency.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::bench {

/// SentencePiece's piece types (sentencepiece_model.proto); GGUF's tokenizer.ggml.token_type uses the same numbers.
enum class piece_type : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

/// One vocabulary entry; its id is its index.
struct sentencepiece_piece {
  std::string text;
  float score = 0.0f;
  piece_type type = piece_type::normal;  // the proto's default when the field is absent
};

/// Decodes the pieces of a ModelProto held in `bytes`. Throws std::runtime_error naming `origin` and what is malformed
/// (a truncated varint or field, an unknown wire type, a piece without text, a type outside 1..6) or when there are no
/// pieces at all.
std::vector<sentencepiece_piece> parse_sentencepiece_model(std::string_view bytes, std::string_view origin);

/// Reads and decodes the file at `path` (errors as above, or when it cannot be read).
std::vector<sentencepiece_piece> read_sentencepiece_model(const std::filesystem::path& path);

}  // namespace actorllm::bench
