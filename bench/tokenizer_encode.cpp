// Tokenizer benchmark: single-thread encode throughput (MB/s of UTF-8 input) of the Llama 3, Qwen3 and Llama 2
// tokenizers on a few MB of mixed text (English prose and docs, code, numbers, CJK, emoji, whitespace runs), plus
// decode throughput and load time. The corpus is generated deterministically from the shared docs, test texts and
// chat templates, with seeded variation so that no two documents repeat exactly. Encoding
// goes document by document (a few KB each, like prompts). Prints a table; writes JSON (--json PATH).
//
// Single-threaded on purpose: encode is independent per request, so throughput scales with the threads an engine
// gives it; the per-thread word cache of the BPE model needs no locks.
#include "bench/bench_json.hpp"
#include "text/tokenizer.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A code sample in the mix (C++ with the usual punctuation, indentation and numbers).
constexpr const char* code_sample = R"(template <class T>
std::vector<T> moving_average(const std::vector<T>& xs, size_t window) {
  std::vector<T> out;
  out.reserve(xs.size());
  T sum{};
  for (size_t i = 0; i < xs.size(); ++i) {
    sum += xs[i];
    if (i >= window) sum -= xs[i - window];
    out.push_back(sum / static_cast<T>(std::min(i + 1, window)));
  }
  return out;  // O(n), 0x1F & 0b1010 == 10
}
def softmax(logits, temperature=0.7):
    m = max(logits)
    exps = [math.exp((x - m) / temperature) for x in logits]
    return [e / sum(exps) for e in exps]
)";

// Text sources: the shared data's documentation, llama.cpp's tokenizer test texts and the chat templates (all
// checksummed in their SOURCE.md files, so the corpus is the same on every machine), plus the code sample.
std::vector<std::string> source_texts(const std::filesystem::path& shared) {
  std::vector<std::string> texts{code_sample};
  auto add = [&](const std::filesystem::path& p) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) {
      std::string t = read_file(p);
      if (!t.empty())
        texts.push_back(std::move(t));
    }
  };
  const auto models = shared / "models";
  for (const char* f :
       {"docs/DESIGN.md", "docs/STYLE.md", "models/README.md", "models/stories260K/SOURCE.md",
        "models/llama2-tokenizer/SOURCE.md", "models/tokenizers/llama3/SOURCE.md", "models/tokenizers/qwen3/SOURCE.md",
        "models/tokenizers/mistral/SOURCE.md", "models/tokenizers/llama3/testcases/llamacpp-llama-bpe.inp"})
    add(shared / f);
  std::vector<std::filesystem::path> templates;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(models / "chat-templates", ec))
    templates.push_back(e.path());
  std::sort(templates.begin(), templates.end());  // directory order is not deterministic
  for (const auto& t : templates)
    add(t);
  return texts;
}

// Builds documents of 1-8 KB until `total_bytes`: slices of the sources, with seeded variation (numbers,
// whitespace runs, CJK and emoji passages, case changes) so that the text keeps changing.
std::vector<std::string> make_corpus(const std::vector<std::string>& sources, size_t total_bytes) {
  std::mt19937 rng{20261122};
  auto pick = [&](size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>{lo, hi}(rng); };
  static const char* const cjk[] = {"大型语言模型的推理服务需要高效的调度。", "トークナイザーはテキストを分割します。",
                                    "한국어 문장도 포함됩니다.", "数据并行与张量并行可以组合使用，以提高吞吐量。"};
  static const char* const emoji[] = {"🦙", "🚀", "😀", "👩‍💻", "🇫🇷", "✅", "🔥🔥", "🧠"};
  std::vector<std::string> docs;
  size_t bytes = 0;
  while (bytes < total_bytes) {
    std::string doc;
    const size_t target = pick(1024, 8192);
    while (doc.size() < target) {
      switch (pick(0, 9)) {
        case 0:
          doc += std::to_string(pick(0, 1u << 31)) + (pick(0, 1) ? "." + std::to_string(pick(0, 999)) : "") + " ";
          break;
        case 1:
          doc += std::string(pick(2, 12), pick(0, 1) ? ' ' : '\n');
          break;
        case 2:
          doc += cjk[pick(0, 3)];
          break;
        case 3:
          doc += emoji[pick(0, 7)];
          doc += ' ';
          break;
        default: {
          const std::string& s = sources[pick(0, sources.size() - 1)];
          const size_t len = pick(80, 900);
          const size_t at = s.size() > len ? pick(0, s.size() - len) : 0;
          std::string slice = s.substr(at, len);
          if (pick(0, 4) == 0) {
            for (char& c : slice)
              if (c >= 'a' && c <= 'z' && pick(0, 9) == 0)
                c = static_cast<char>(c - 'a' + 'A');
          }
          doc += slice;
        }
      }
    }
    bytes += doc.size();
    docs.push_back(std::move(doc));
  }
  // Slices may cut a multi-byte character: keep the corpus well-formed UTF-8 as real prompts are.
  for (std::string& d : docs) {
    std::string clean;
    size_t i = 0;
    while (i < d.size()) {
      const auto c = static_cast<unsigned char>(d[i]);
      size_t n = c < 0x80 ? 1 : c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      bool ok = n > 0 && i + n <= d.size();
      for (size_t k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(d[i + k]) & 0xC0) == 0x80;
      if (ok)
        clean.append(d, i, n);
      i += ok ? n : 1;
    }
    d = std::move(clean);
  }
  return docs;
}

struct result {
  std::string name;
  double load_s = 0;
  double encode_mb_s = 0;
  double encode_cold_mb_s = 0;  // the first pass, with this thread's word cache still empty
  double encode_tokens_s = 0;
  double decode_mb_s = 0;
  double bytes_per_token = 0;
  size_t tokens = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_tokenizer_encode: single-thread tokenizer encode/decode throughput"};
  std::string json_path = "bench/results/tokenizer_encode.json";
  std::string shared = ACTORLLM_SHARED_DIR;
  double megabytes = 4.0;
  int repeats = 3;
  app.add_option("--json", json_path, "Where to write the results");
  app.add_option("--shared", shared, "The shared data directory (models/...)");
  app.add_option("--mb", megabytes, "Corpus size in MB");
  app.add_option("--repeats", repeats, "Timed passes per tokenizer (the best is reported)");
  CLI11_PARSE(app, argc, argv);

  const auto sources = source_texts(shared);
  if (sources.empty()) {
    fmt::print(stderr, "bench_tokenizer_encode: no source texts found\n");
    return 1;
  }
  const auto corpus = make_corpus(sources, static_cast<size_t>(megabytes * 1e6));
  size_t corpus_bytes = 0;
  for (const auto& d : corpus)
    corpus_bytes += d.size();
  fmt::print("corpus: {} documents, {:.2f} MB, from {} source texts\n", corpus.size(), corpus_bytes / 1e6,
             sources.size());

  std::vector<result> results;
  const std::pair<const char*, const char*> tokenizers[] = {{"llama3", "models/tokenizers/llama3"},
                                                            {"qwen3", "models/tokenizers/qwen3"},
                                                            {"llama2", "models/llama2-tokenizer"}};
  for (const auto& [name, dir] : tokenizers) {
    result r;
    r.name = name;
    auto t0 = clock_type::now();
    const auto tok = text::tokenizer::from_directory(std::filesystem::path{shared} / dir);
    r.load_s = seconds_since(t0);
    std::vector<std::vector<int32_t>> encoded(corpus.size());
    double best_encode = 1e30;
    double first_encode = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      t0 = clock_type::now();
      for (size_t i = 0; i < corpus.size(); ++i)
        encoded[i] = tok.encode(corpus[i], false);
      const double s = seconds_since(t0);
      if (rep == 0)
        first_encode = s;
      best_encode = std::min(best_encode, s);
    }
    for (const auto& e : encoded)
      r.tokens += e.size();
    double best_decode = 1e30;
    size_t decoded_bytes = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      decoded_bytes = 0;
      t0 = clock_type::now();
      for (const auto& e : encoded)
        decoded_bytes += tok.decode(e).size();
      best_decode = std::min(best_decode, seconds_since(t0));
    }
    r.encode_mb_s = corpus_bytes / 1e6 / best_encode;
    r.encode_cold_mb_s = corpus_bytes / 1e6 / first_encode;
    r.encode_tokens_s = static_cast<double>(r.tokens) / best_encode;
    r.decode_mb_s = decoded_bytes / 1e6 / best_decode;
    r.bytes_per_token = static_cast<double>(corpus_bytes) / static_cast<double>(r.tokens);
    results.push_back(r);
  }

  fmt::print("\n{:<9} {:>8} {:>12} {:>12} {:>14} {:>12} {:>12} {:>10}\n", "tokenizer", "load s", "encode MB/s",
             "(1st pass)", "encode tok/s", "decode MB/s", "bytes/token", "tokens");
  for (const auto& r : results)
    fmt::print("{:<9} {:>8.3f} {:>12.2f} {:>12.2f} {:>14.0f} {:>12.2f} {:>12.2f} {:>10}\n", r.name, r.load_s,
               r.encode_mb_s, r.encode_cold_mb_s, r.encode_tokens_s, r.decode_mb_s, r.bytes_per_token, r.tokens);

  json_writer j;
  j.begin_object().key("benchmark").value("tokenizer_encode").key("threads").value(1);
  j.key("corpus").begin_object().key("documents").value(static_cast<uint64_t>(corpus.size()));
  j.key("bytes").value(static_cast<uint64_t>(corpus_bytes)).end_object();
  j.key("results").begin_array();
  for (const auto& r : results) {
    j.begin_object().key("tokenizer").value(r.name).key("load_s").value(r.load_s);
    j.key("encode_mb_per_s").value(r.encode_mb_s).key("encode_first_pass_mb_per_s").value(r.encode_cold_mb_s);
    j.key("encode_tokens_per_s").value(r.encode_tokens_s);
    j.key("decode_mb_per_s").value(r.decode_mb_s).key("bytes_per_token").value(r.bytes_per_token);
    j.key("tokens").value(static_cast<uint64_t>(r.tokens)).end_object();
  }
  j.end_array().end_object();
  return bench::write_json_result(json_path, j.str());
}
