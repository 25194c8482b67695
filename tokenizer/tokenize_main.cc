// Encodes a file with a BPE or WordPiece tokenizer and writes its ids, for checks and
// benchmarks:
//   bazel run //tokenizer:tokenize -- --tokenizer_json=tokenizer.json --input=text.txt
//       --output=ids.bin        (a BPE or a WordPiece model: the file says which)
//   bazel run //tokenizer:tokenize -- --vocab=vocab.json --merges=merges.txt --input=...
//   bazel run //tokenizer:tokenize -- --wordpiece_vocab=vocab.txt [--cased] --input=...
// The ids are little-endian int32. Prints one JSON line: bytes, tokens, seconds, MB/s (one
// thread; the load is not timed).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/wordpiece_tokenizer.h"

ABSL_FLAG(std::string, tokenizer_json, "", "a HuggingFace tokenizer.json (BPE or WordPiece)");
ABSL_FLAG(std::string, wordpiece_vocab, "", "BERT's vocab.txt (WordPiece)");
ABSL_FLAG(bool, cased, false, "--wordpiece_vocab: a cased model (no lower case, accents kept)");
ABSL_FLAG(std::string, vocab, "", "GPT-2 style vocab.json (with --merges)");
ABSL_FLAG(std::string, merges, "", "GPT-2 style merges.txt (with --vocab)");
ABSL_FLAG(std::string, input, "", "the text to encode (any bytes)");
ABSL_FLAG(std::string, output, "", "where to write the ids (little-endian int32); optional");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string json = absl::GetFlag(FLAGS_tokenizer_json);
  const std::string wordpiece_vocab = absl::GetFlag(FLAGS_wordpiece_vocab);
  std::function<std::vector<int32_t>(const std::string&)> encode;
  absl::Status loaded;
  if (!wordpiece_vocab.empty()) {
    mtrain::BertNormalizerOptions options;
    options.lowercase = !absl::GetFlag(FLAGS_cased);
    absl::StatusOr<mtrain::WordPieceTokenizer> wordpiece =
        mtrain::WordPieceTokenizer::FromVocabTxt(wordpiece_vocab, options);
    loaded = wordpiece.status();
    if (wordpiece.ok()) {
      encode = [t = *std::move(wordpiece)](const std::string& text) { return t.Encode(text); };
    }
  } else {
    absl::StatusOr<mtrain::BpeTokenizer> bpe =
        !json.empty() ? mtrain::BpeTokenizer::FromHuggingFaceJson(json)
                      : mtrain::BpeTokenizer::FromVocabAndMerges(absl::GetFlag(FLAGS_vocab),
                                                                 absl::GetFlag(FLAGS_merges));
    loaded = bpe.status();
    if (bpe.ok()) {
      auto shared = std::make_shared<mtrain::BpeTokenizer>(*std::move(bpe));
      encode = [shared](const std::string& text) { return shared->Encode(text); };
    } else if (!json.empty() && absl::StrContains(bpe.status().message(), "model.type")) {
      // Not a BPE: a WordPiece model, if it is one.
      absl::StatusOr<mtrain::WordPieceTokenizer> wordpiece =
          mtrain::WordPieceTokenizer::FromHuggingFaceJson(json);
      loaded = wordpiece.status();
      if (wordpiece.ok()) {
        encode = [t = *std::move(wordpiece)](const std::string& text) { return t.Encode(text); };
      }
    }
  }
  if (!loaded.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", loaded.ToString().c_str());
    return 2;
  }
  std::ifstream in(absl::GetFlag(FLAGS_input), std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tokenize: --input=%s cannot be read\n",
                 absl::GetFlag(FLAGS_input).c_str());
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (const std::string out = absl::GetFlag(FLAGS_output); !out.empty()) {
    std::ofstream file(out, std::ios::binary);
    file.write(reinterpret_cast<const char*>(ids.data()),
               static_cast<std::streamsize>(ids.size() * sizeof(int32_t)));
    if (!file) {
      std::fprintf(stderr, "tokenize: --output=%s cannot be written\n", out.c_str());
      return 1;
    }
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f}\n",
              text.size(), ids.size(), seconds, text.size() / seconds / 1e6);
  return 0;
}
