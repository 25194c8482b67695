// Megatron-style preprocessing: JSONL or text files in, indexed datasets out, with a
// progress line and a summary of what was dropped and why (preprocess.h):
//   bazel run //data:preprocess -- --input=corpus.jsonl
//       --output-prefix=/data/corpus --vocab-file=vocab.json --merge-file=merges.txt
//       --append-eod --workers=8
// writes /data/corpus_text_document.bin/.idx. Flags take Megatron's spelling (dashes) or
// underscores.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "data/preprocess.h"

ABSL_FLAG(std::vector<std::string>, input, {}, "input files, comma-separated");
ABSL_FLAG(std::string, format, "auto",
          "jsonl, text, or auto (jsonl for .jsonl/.json files, text otherwise)");
ABSL_FLAG(std::vector<std::string>, json_keys, {"text"}, "JSON keys holding documents");
ABSL_FLAG(std::string, output_prefix, "", "writes PREFIX_KEY_document.bin/.idx per key");
ABSL_FLAG(std::string, tokenizer_type, "",
          "GPT2BPETokenizer (with --vocab-file and "
          "--merge-file), HuggingFaceTokenizer (with --tokenizer-json: BPE or WordPiece), "
          "BertWordPieceLowerCase or BertWordPieceCase (with --vocab-file: vocab.txt) or "
          "ByteTokenizer; default: from the files given");
ABSL_FLAG(std::string, vocab_file, "", "GPT-2 vocab.json, or BERT's vocab.txt");
ABSL_FLAG(bool, split_sentences, false,
          "write each document as its sentences, one sequence each (BERT's samples pair "
          "them): PREFIX_KEY_sentence.bin/.idx");
ABSL_FLAG(std::string, merge_file, "", "GPT-2 merges.txt");
ABSL_FLAG(std::string, tokenizer_json, "", "a HuggingFace tokenizer.json (BPE or WordPiece)");
ABSL_FLAG(bool, append_eod, false, "end each document with <|endoftext|>");
ABSL_FLAG(int, workers, 0, "tokenizing threads (0: every core)");
ABSL_FLAG(int64_t, min_tokens, 128, "drop documents with fewer tokens (0: keep all)");
ABSL_FLAG(bool, exact_dedup, true, "drop documents whose text equals an earlier one's");
ABSL_FLAG(bool, near_dedup, true, "drop near-duplicates (MinHash LSH)");
ABSL_FLAG(double, dedup_threshold, 0.7, "Jaccard similarity the LSH bands are tuned for");
ABSL_FLAG(int, dedup_permutations, 128, "MinHash permutations (bands x rows at most this)");
ABSL_FLAG(int, dedup_bands, 0, "LSH bands (0: chosen for --dedup-threshold)");
ABSL_FLAG(int, dedup_rows, 0, "LSH rows a band (0: chosen for --dedup-threshold)");
ABSL_FLAG(std::string, dedup_shingles, "word", "word or char n-grams");
ABSL_FLAG(int, dedup_ngram, 5, "words (or bytes) a shingle");
ABSL_FLAG(std::string, dropped_log, "",
          "write one line per dropped document: INDEX<tab>FILE:LINE<tab>REASON");
ABSL_FLAG(bool, progress, true, "a progress line on stderr, updated each batch");

namespace {

// Megatron spells its flags with dashes; absl wants underscores in the name.
std::vector<char*> UnderscoreFlagNames(int argc, char** argv, std::vector<std::string>* storage) {
  storage->reserve(argc);
  std::vector<char*> out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && arg.size() > 2 && arg[0] == '-' && arg[1] == '-') {
      const size_t end = std::min(arg.find('='), arg.size());
      for (size_t c = 2; c < end; ++c) {
        if (arg[c] == '-') arg[c] = '_';
      }
    }
    storage->push_back(arg);
  }
  for (std::string& s : *storage) out.push_back(s.data());
  return out;
}

std::string Count(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> storage;
  std::vector<char*> args = UnderscoreFlagNames(argc, argv, &storage);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  mtrain::PreprocessOptions options;
  options.inputs = absl::GetFlag(FLAGS_input);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "auto") {
    options.jsonl = !options.inputs.empty() && (absl::EndsWith(options.inputs[0], ".jsonl") ||
                                                absl::EndsWith(options.inputs[0], ".json"));
  } else if (format == "jsonl" || format == "text") {
    options.jsonl = format == "jsonl";
  } else {
    std::fprintf(stderr, "preprocess: --format=%s: must be jsonl, text or auto\n", format.c_str());
    return 2;
  }
  options.json_keys = absl::GetFlag(FLAGS_json_keys);
  options.output_prefix = absl::GetFlag(FLAGS_output_prefix);
  options.vocab_file = absl::GetFlag(FLAGS_vocab_file);
  options.merge_file = absl::GetFlag(FLAGS_merge_file);
  options.tokenizer_json = absl::GetFlag(FLAGS_tokenizer_json);
  std::string type = absl::GetFlag(FLAGS_tokenizer_type);
  if (type.empty()) {
    type = !options.tokenizer_json.empty() ? "HuggingFaceTokenizer"
           : !options.vocab_file.empty()   ? "GPT2BPETokenizer"
                                           : "";
  }
  if (type == "GPT2BPETokenizer") {
    options.tokenizer = mtrain::PreprocessTokenizer::kGpt2Files;
  } else if (type == "HuggingFaceTokenizer") {
    options.tokenizer = mtrain::PreprocessTokenizer::kHuggingFaceJson;
  } else if (type == "ByteTokenizer") {
    options.tokenizer = mtrain::PreprocessTokenizer::kByte;
  } else if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    options.tokenizer = mtrain::PreprocessTokenizer::kBertVocab;
    options.lowercase = type == "BertWordPieceLowerCase";
  } else {
    std::fprintf(stderr,
                 "preprocess: --tokenizer-type=%s: give GPT2BPETokenizer (--vocab-file, "
                 "--merge-file), HuggingFaceTokenizer (--tokenizer-json), "
                 "BertWordPieceLowerCase or BertWordPieceCase (--vocab-file: BERT's vocab.txt) "
                 "or ByteTokenizer\n",
                 type.c_str());
    return 2;
  }
  options.split_sentences = absl::GetFlag(FLAGS_split_sentences);
  options.append_eod = absl::GetFlag(FLAGS_append_eod);
  options.workers = absl::GetFlag(FLAGS_workers);
  if (options.workers <= 0) options.workers = static_cast<int>(std::thread::hardware_concurrency());
  options.min_tokens = absl::GetFlag(FLAGS_min_tokens);
  options.exact_dedup = absl::GetFlag(FLAGS_exact_dedup);
  options.near_dedup = absl::GetFlag(FLAGS_near_dedup);
  options.dropped_log = absl::GetFlag(FLAGS_dropped_log);
  const std::string shingles = absl::GetFlag(FLAGS_dedup_shingles);
  if (shingles != "word" && shingles != "char") {
    std::fprintf(stderr, "preprocess: --dedup-shingles=%s: must be word or char\n",
                 shingles.c_str());
    return 2;
  }
  options.minhash.shingles =
      shingles == "word" ? mtrain::ShingleKind::kWords : mtrain::ShingleKind::kCharacters;
  options.minhash.ngram = absl::GetFlag(FLAGS_dedup_ngram);
  std::tie(options.minhash.bands, options.minhash.rows) = mtrain::OptimalBandsAndRows(
      absl::GetFlag(FLAGS_dedup_threshold), absl::GetFlag(FLAGS_dedup_permutations));
  if (absl::GetFlag(FLAGS_dedup_bands) > 0)
    options.minhash.bands = absl::GetFlag(FLAGS_dedup_bands);
  if (absl::GetFlag(FLAGS_dedup_rows) > 0) options.minhash.rows = absl::GetFlag(FLAGS_dedup_rows);

  const bool show = absl::GetFlag(FLAGS_progress);
  auto progress = [&](const mtrain::PreprocessProgress& p) {
    if (!show) return;
    const double mb = p.bytes_read / 1e6;
    std::fprintf(stderr, "\r%8.1f MB  %6.1f MB/s  %8.0f docs/s  kept %s  dropped %s   ", mb,
                 mb / std::max(p.seconds, 1e-9), p.documents / std::max(p.seconds, 1e-9),
                 Count(p.kept).c_str(), Count(p.dropped).c_str());
  };
  absl::StatusOr<mtrain::PreprocessSummary> summary = mtrain::RunPreprocess(options, progress);
  if (show) std::fprintf(stderr, "\n");
  if (!summary.ok()) {
    std::fprintf(stderr, "preprocess: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const mtrain::PreprocessProgress& p = summary->progress;
  std::printf(
      "read %s documents (%.1f MB) in %.1f s: %.1f MB/s on %d workers (%.1f MB/s a worker)\n"
      "kept %s; dropped %s shorter than %lld tokens, %s exact duplicates, %s near-duplicates "
      "(MinHash %s %d-grams, %d bands x %d rows)\n"
      "wrote %s tokens (%s) to:",
      Count(p.documents).c_str(), p.bytes_read / 1e6, p.seconds, p.bytes_read / 1e6 / p.seconds,
      options.workers, p.bytes_read / 1e6 / p.seconds / options.workers, Count(p.kept).c_str(),
      Count(summary->too_short).c_str(), static_cast<long long>(options.min_tokens),
      Count(summary->exact_duplicates).c_str(), Count(summary->near_duplicates).c_str(),
      shingles.c_str(), options.minhash.ngram, options.minhash.bands, options.minhash.rows,
      Count(summary->tokens_written).c_str(),
      summary->dtype == mtrain::IndexedDtype::kUint16 ? "uint16" : "int32");
  for (const std::string& prefix : summary->outputs) std::printf(" %s.{bin,idx}", prefix.c_str());
  std::printf("\n");
  return 0;
}
