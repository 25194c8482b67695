// The library half of `preprocess` (preprocess_main.cc): JSONL or text files in, Megatron
// indexed datasets out, as Megatron-LM's tools/preprocess_data.py makes them, with the
// cleaning the Megatron paper's corpus had: documents shorter than a minimum number of
// tokens dropped, exact duplicates dropped, near-duplicates dropped by MinHash LSH
// (minhash_deduplicator.h).
//
// Streaming: the input is read in batches of about `batch_bytes`; `workers` threads parse,
// tokenize and fingerprint batches while the calling thread filters and writes them in
// input order, with at most `workers + 1` batches in memory. The output is the same for
// any worker count. For each JSON key K (text files: "text") it writes
// <output_prefix>_K_document.bin/.idx: one sequence per kept document (+ the end-of-
// document id with append_eod), uint16 ids when the vocabulary fits, int32 otherwise; with
// split_sentences, <output_prefix>_K_sentence.bin/.idx: one sequence per sentence, the
// document's sentences one document (the end-of-document id after its last sentence).
//
//   ASSIGN_OR_RETURN(PreprocessSummary s, RunPreprocess(options, [](const auto& p) {...}));
#ifndef MTRAIN_DATA_PREPROCESS_H_
#define MTRAIN_DATA_PREPROCESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/indexed_dataset_format.h"
#include "data/minhash_deduplicator.h"

namespace mtrain {

// kHuggingFaceJson: a BPE or WordPiece tokenizer.json (the file says which). kBertVocab:
// BERT's vocab.txt (`vocab_file`) for WordPiece, lower-cased or cased.
enum class PreprocessTokenizer { kByte, kGpt2Files, kHuggingFaceJson, kBertVocab };

struct PreprocessOptions {
  std::vector<std::string> inputs;
  // JSON Lines (one object per line, documents in `json_keys`) or plain text (documents
  // separated by `text_separator`, the rule of build_indexed_dataset.h).
  bool jsonl = true;
  std::vector<std::string> json_keys = {"text"};
  std::string text_separator = "\n\n";
  std::string output_prefix;

  PreprocessTokenizer tokenizer = PreprocessTokenizer::kGpt2Files;
  std::string vocab_file, merge_file;  // kGpt2Files
  std::string tokenizer_json;          // kHuggingFaceJson
  bool lowercase = true;               // kBertVocab: an uncased model
  bool append_eod = false;
  // Each document written as its sentences (sentence_splitter.h), one sequence each, for
  // BERT's samples (Megatron's --split-sentences); sentences without tokens are left out.
  bool split_sentences = false;

  int workers = 1;
  size_t batch_bytes = size_t{4} << 20;

  // Filters, in this order; each counts what it drops.
  int64_t min_tokens = 128;  // documents with fewer tokens (all keys) are dropped; 0: none
  bool exact_dedup = true;   // a document whose text equals an earlier one's
  bool near_dedup = true;    // MinHash LSH
  MinHashOptions minhash;
  // When set, one line per dropped document: "INDEX\tFILE:LINE\tREASON" (INDEX counts
  // documents from 0 across all inputs; LINE is 0 for text files; REASON is too_short,
  // exact_duplicate or near_duplicate).
  std::string dropped_log;
};

struct PreprocessProgress {
  int64_t bytes_read = 0;
  int64_t documents = 0;
  int64_t kept = 0;
  int64_t dropped = 0;
  double seconds = 0;
};

struct PreprocessSummary {
  PreprocessProgress progress;
  int64_t too_short = 0, exact_duplicates = 0, near_duplicates = 0;
  int64_t tokens_written = 0;
  IndexedDtype dtype = IndexedDtype::kUint16;
  std::vector<std::string> outputs;  // the prefixes written
  size_t dedup_memory_bytes = 0;
};

// INVALID_ARGUMENT naming the input file and line for a line that is not a JSON object or
// lacks a key, or for a tokenizer that does not load; NOT_FOUND for a missing input.
// Nothing is left under the output prefix when it fails.
absl::StatusOr<PreprocessSummary> RunPreprocess(
    const PreprocessOptions& options,
    const std::function<void(const PreprocessProgress&)>& progress = nullptr);

}  // namespace mtrain

#endif  // MTRAIN_DATA_PREPROCESS_H_
