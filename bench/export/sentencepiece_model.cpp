#include "bench/export/sentencepiece_model.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace actorllm::bench {

namespace {

// Protobuf wire types (the low three bits of a field's tag).
constexpr uint32_t wire_varint = 0, wire_fixed64 = 1, wire_length = 2, wire_fixed32 = 5;

// ModelProto.pieces and the fields of SentencePiece that a GGUF vocabulary needs.
constexpr uint64_t model_pieces = 1, piece_text = 1, piece_score = 2, piece_type_field = 3;

/// A cursor over one message's bytes; every read checks the bounds and names `origin` when they are crossed.
class wire_reader {
 public:
  wire_reader(std::string_view bytes, std::string_view origin, std::string what)
      : bytes_(bytes), origin_(origin), what_(std::move(what)) {}

  bool done() const { return pos_ >= bytes_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done())
        fail("truncated varint");
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0)
        return value;
    }
    fail("varint longer than 10 bytes");
  }

  std::string_view bytes(size_t n) {
    if (n > bytes_.size() - pos_)
      fail(fmt::format("field of {} bytes runs past the end", n));
    const std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  /// Skips a field of `wire` type whose tag has been read.
  void skip(uint32_t wire, uint64_t field) {
    switch (wire) {
      case wire_varint:
        varint();
        return;
      case wire_fixed64:
        bytes(8);
        return;
      case wire_length:
        bytes(static_cast<size_t>(varint()));
        return;
      case wire_fixed32:
        bytes(4);
        return;
      default:  // 3 and 4 are the deprecated groups, which sentencepiece never writes
        fail(fmt::format("field {} has wire type {}, which a tokenizer.model does not use", field, wire));
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(fmt::format("{}: {} at byte {}: {}", origin_, what_, pos_, why));
  }

 private:
  std::string_view bytes_, origin_;
  std::string what_;  // "piece 12": made for this reader
  size_t pos_ = 0;
};

sentencepiece_piece parse_piece(std::string_view bytes, std::string_view origin, size_t id) {
  wire_reader in{bytes, origin, fmt::format("piece {}", id)};
  sentencepiece_piece piece;
  bool has_text = false;
  while (!in.done()) {
    const uint64_t tag = in.varint();
    const auto wire = static_cast<uint32_t>(tag & 7);
    const uint64_t field = tag >> 3;
    if (field == piece_text && wire == wire_length) {
      piece.text = std::string{in.bytes(static_cast<size_t>(in.varint()))};
      has_text = true;
    } else if (field == piece_score && wire == wire_fixed32) {
      const std::string_view raw = in.bytes(4);  // little-endian IEEE float, as on every machine this builds for
      std::memcpy(&piece.score, raw.data(), 4);
    } else if (field == piece_type_field && wire == wire_varint) {
      const uint64_t t = in.varint();
      if (t < 1 || t > 6)
        in.fail(fmt::format("type {} is none of SentencePiece's 1..6", t));
      piece.type = static_cast<piece_type>(t);
    } else {
      in.skip(wire, field);
    }
  }
  if (!has_text)
    in.fail("no piece text (field 1)");
  return piece;
}

}  // namespace

std::vector<sentencepiece_piece> parse_sentencepiece_model(std::string_view bytes, std::string_view origin) {
  wire_reader in{bytes, origin, "ModelProto"};
  std::vector<sentencepiece_piece> pieces;
  while (!in.done()) {
    const uint64_t tag = in.varint();
    const auto wire = static_cast<uint32_t>(tag & 7);
    const uint64_t field = tag >> 3;
    if (field == model_pieces && wire == wire_length)
      pieces.push_back(parse_piece(in.bytes(static_cast<size_t>(in.varint())), origin, pieces.size()));
    else
      in.skip(wire, field);
  }
  if (pieces.empty())
    throw std::runtime_error(fmt::format("{}: no pieces (ModelProto field 1): not a SentencePiece model", origin));
  return pieces;
}

std::vector<sentencepiece_piece> read_sentencepiece_model(const std::filesystem::path& path) {
  std::ifstream file{path, std::ios::binary};
  if (!file)
    throw std::runtime_error(fmt::format("{}: cannot be read", path.string()));
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return parse_sentencepiece_model(bytes.str(), path.string());
}

}  // namespace actorllm::bench
