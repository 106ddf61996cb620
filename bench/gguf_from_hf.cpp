// Writes a Hugging Face Llama checkpoint as a GGUF file llama.cpp loads, with the same tensor bytes (no conversion):
// bench/compare_llama_cpp.sh runs bench_cpu_decode on the checkpoint and llama.cpp on this file. The tokenizer is a
// SentencePiece tokenizer.model (the model directory's, or --tokenizer). Not a benchmark itself: it prints what it
// wrote.
#include "bench/export/llama_gguf.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"Write a Hugging Face Llama checkpoint as GGUF with the same tensor bytes"};
  std::string model_dir, tokenizer, out;
  app.add_option("--model", model_dir, "Hugging Face model directory: config.json and safetensors")->required();
  app.add_option("--tokenizer", tokenizer, "SentencePiece tokenizer.model (default: the model directory's)");
  app.add_option("--out", out, "The GGUF file to write")->required();
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) {
    std::fprintf(stderr, "--model: %s is not a directory\n", model_dir.c_str());
    return 2;
  }
  if (tokenizer.empty())
    tokenizer = (fs::path{model_dir} / "tokenizer.model").string();
  if (!fs::is_regular_file(tokenizer)) {
    std::fprintf(stderr, "--tokenizer: %s is not a file (a SentencePiece tokenizer.model is needed)\n",
                 tokenizer.c_str());
    return 2;
  }
  try {
    const auto s = actorllm::bench::write_llama_gguf(model_dir, tokenizer, out);
    std::printf("wrote %s: %zu tensors, %.3f GB of tensor data, file_type %u, %zu tokens\n", out.c_str(), s.n_tensors,
                static_cast<double>(s.tensor_bytes) / 1e9, s.file_type, s.n_vocab);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gguf_from_hf: %s\n", e.what());
    std::error_code ec;
    fs::remove(out, ec);  // no half-written file left for llama.cpp to trip on
    return 1;
  }
  return 0;
}
