#include "data/preprocess.h"

#include <chrono>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "data/build_indexed_dataset.h"
#include "data/byte_tokenizer.h"
#include "data/indexed_dataset_writer.h"
#include "data/sentence_splitter.h"
#include "nlohmann/json.hpp"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace mtrain {
namespace {

// Documents as read: JSON lines or text documents, with where they came from.
struct RawBatch {
  std::vector<std::string> records;
  std::string file;
  std::vector<int64_t> lines;  // JSONL: each record's line (1-based); text: 0
  int64_t bytes = 0;
};

struct ProcessedDocument {
  std::vector<std::vector<int32_t>> ids;  // per key
  // split_sentences: per key, the ids of each sentence with tokens.
  std::vector<std::vector<std::vector<int32_t>>> sentences;
  int64_t tokens = 0;
  uint64_t text_hash = 0;
  MinHashSignature signature;
};

struct ProcessedBatch {
  absl::Status status;
  std::vector<ProcessedDocument> documents;
  int64_t bytes = 0;
  std::string file;
  std::vector<int64_t> lines;
};

// Reads the inputs in order, a batch of about `batch_bytes` at a time, never holding a
// whole file.
class BatchReader {
 public:
  explicit BatchReader(const PreprocessOptions& options) : options_(options) {}

  // False at the end of the last input.
  absl::StatusOr<bool> Next(RawBatch* batch) {
    *batch = RawBatch();
    while (batch->bytes < static_cast<int64_t>(options_.batch_bytes)) {
      if (!in_.is_open() || in_.eof()) {
        if (!pending_.empty()) {  // the file's last text documents
          for (absl::string_view document : SplitIntoDocuments(pending_, options_.text_separator)) {
            Emit(batch, std::string(document), 0);
          }
          pending_.clear();
        }
        if (next_file_ >= options_.inputs.size()) break;
        if (batch->bytes > 0) break;  // a batch holds one file's documents
        in_.close();
        in_.clear();
        file_ = options_.inputs[next_file_++];
        in_.open(file_, std::ios::binary);
        if (!in_) return absl::NotFoundError(absl::StrCat("input ", file_, ": cannot be read"));
        line_ = 0;
        batch->file = file_;
        continue;
      }
      batch->file = file_;
      if (options_.jsonl) {
        std::string line;
        if (!std::getline(in_, line)) continue;
        ++line_;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
        Emit(batch, std::move(line), line_);
      } else {
        char chunk[1 << 16];
        in_.read(chunk, sizeof(chunk));
        const size_t before = pending_.size();
        pending_.append(chunk, static_cast<size_t>(in_.gcount()));
        // Split only when the new bytes hold a separator (an empty separator makes the file
        // one document): a long document is then read in linear time, not re-split per chunk.
        const std::string& separator = options_.text_separator;
        if (separator.empty() ||
            pending_.find(separator, before >= separator.size() ? before - separator.size() + 1
                                                                : 0) == std::string::npos) {
          continue;
        }
        std::vector<absl::string_view> documents = SplitIntoDocuments(pending_, separator);
        if (documents.size() < 2) continue;
        // All but the last are complete: the last may continue in the next chunk.
        for (size_t d = 0; d + 1 < documents.size(); ++d) {
          Emit(batch, std::string(documents[d]), 0);
        }
        pending_ = std::string(documents.back());
      }
    }
    return !batch->records.empty() || next_file_ < options_.inputs.size() || !pending_.empty();
  }

 private:
  void Emit(RawBatch* batch, std::string record, int64_t line) {
    batch->bytes += static_cast<int64_t>(record.size()) + (options_.jsonl ? 1 : 0);
    batch->records.push_back(std::move(record));
    batch->lines.push_back(line);
  }

  const PreprocessOptions& options_;
  std::ifstream in_;
  std::string file_;
  size_t next_file_ = 0;
  int64_t line_ = 0;
  std::string pending_;
};

// One tokenizer per batch in flight (a BpeTokenizer's piece cache is not shared).
class TokenizerPool {
 public:
  static absl::StatusOr<std::unique_ptr<TokenizerPool>> Create(const PreprocessOptions& o,
                                                               int size) {
    auto pool = std::unique_ptr<TokenizerPool>(new TokenizerPool);
    if (o.tokenizer == PreprocessTokenizer::kByte) {
      pool->vocab_size_ = ByteTokenizer::kVocabSize;
      MutexLock lock(&pool->mutex_);
      for (int i = 0; i < size; ++i) pool->free_.push_back(-1);
      return pool;
    }
    if (o.tokenizer == PreprocessTokenizer::kBertVocab) {
      BertNormalizerOptions normalizer;
      normalizer.lowercase = o.lowercase;
      absl::StatusOr<WordPieceTokenizer> wordpiece =
          WordPieceTokenizer::FromVocabTxt(o.vocab_file, normalizer);
      if (!wordpiece.ok()) return wordpiece.status();
      return WithWordPiece(std::move(pool), *std::move(wordpiece), size);
    }
    absl::StatusOr<BpeTokenizer> first =
        o.tokenizer == PreprocessTokenizer::kGpt2Files
            ? BpeTokenizer::FromVocabAndMerges(o.vocab_file, o.merge_file)
            : BpeTokenizer::FromHuggingFaceJson(o.tokenizer_json);
    if (!first.ok() && o.tokenizer == PreprocessTokenizer::kHuggingFaceJson &&
        absl::StrContains(first.status().message(), "model.type")) {
      // Not a BPE: a WordPiece model, if it is one.
      absl::StatusOr<WordPieceTokenizer> wordpiece =
          WordPieceTokenizer::FromHuggingFaceJson(o.tokenizer_json);
      if (!wordpiece.ok()) return wordpiece.status();
      return WithWordPiece(std::move(pool), *std::move(wordpiece), size);
    }
    if (!first.ok()) return first.status();
    pool->vocab_size_ = first->vocab_size();
    pool->eod_ = first->end_of_document_id();
    for (int i = 1; i < size; ++i) pool->tokenizers_.push_back(first->Clone());
    pool->tokenizers_.push_back(*std::move(first));
    MutexLock lock(&pool->mutex_);
    for (int i = 0; i < size; ++i) pool->free_.push_back(i);
    return pool;
  }

  // WordPiece keeps no cache: one tokenizer serves every batch in flight.
  static std::unique_ptr<TokenizerPool> WithWordPiece(std::unique_ptr<TokenizerPool> pool,
                                                      WordPieceTokenizer wordpiece, int size) {
    pool->vocab_size_ = wordpiece.vocab_size();
    pool->wordpiece_ = std::move(wordpiece);
    MutexLock lock(&pool->mutex_);
    for (int i = 0; i < size; ++i) pool->free_.push_back(-1);
    return pool;
  }

  int Acquire() {
    MutexLock lock(&mutex_);
    while (free_.empty()) available_.Wait(&mutex_);
    const int index = free_.back();
    free_.pop_back();
    return index;
  }
  void Release(int index) {
    MutexLock lock(&mutex_);
    free_.push_back(index);
    available_.Signal();
  }
  void Encode(int index, absl::string_view text, std::vector<int32_t>* ids) const {
    if (wordpiece_.has_value()) {
      wordpiece_->Encode(text, ids);
    } else if (index < 0) {
      const size_t at = ids->size();
      ids->resize(at + text.size());
      ByteTokenizer::EncodeTo(text, ids->data() + at);
    } else {
      tokenizers_[static_cast<size_t>(index)].Encode(text, ids);
    }
  }
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> eod() const { return eod_; }

 private:
  TokenizerPool() = default;
  std::vector<BpeTokenizer> tokenizers_;
  std::optional<WordPieceTokenizer> wordpiece_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> eod_;
  Mutex mutex_;
  CondVar available_;
  std::vector<int> free_ ABSL_GUARDED_BY(mutex_);
};

ProcessedBatch Process(const RawBatch& batch, const PreprocessOptions& options,
                       const TokenizerPool& pool, int tokenizer, const MinHashDeduplicator* dedup) {
  ProcessedBatch out;
  out.bytes = batch.bytes;
  out.file = batch.file;
  out.lines = batch.lines;
  out.documents.resize(batch.records.size());
  std::vector<std::string> texts;
  std::string joined;
  for (size_t r = 0; r < batch.records.size(); ++r) {
    texts.clear();
    if (options.jsonl) {
      const nlohmann::json object = nlohmann::json::parse(batch.records[r], nullptr, false);
      if (object.is_discarded() || !object.is_object()) {
        out.status = absl::InvalidArgumentError(
            absl::StrCat(batch.file, ":", batch.lines[r],
                         ": not a JSON object [rule: JSON Lines, one object a line]"));
        return out;
      }
      for (const std::string& key : options.json_keys) {
        const auto it = object.find(key);
        if (it == object.end() || !it->is_string()) {
          out.status = absl::InvalidArgumentError(
              absl::StrCat(batch.file, ":", batch.lines[r], ": no string \"", key,
                           "\" [rule: --json-keys ", "name string fields of every line]"));
          return out;
        }
        texts.push_back(it->get<std::string>());
      }
    } else {
      texts.push_back(batch.records[r]);
    }
    ProcessedDocument& doc = out.documents[r];
    doc.ids.resize(texts.size());
    if (options.split_sentences) doc.sentences.resize(texts.size());
    joined.clear();
    for (size_t k = 0; k < texts.size(); ++k) {
      if (options.split_sentences) {
        for (absl::string_view sentence : SplitSentences(texts[k])) {
          std::vector<int32_t> ids;
          pool.Encode(tokenizer, sentence, &ids);
          if (ids.empty()) continue;
          doc.tokens += static_cast<int64_t>(ids.size());
          doc.sentences[k].push_back(std::move(ids));
        }
      } else {
        pool.Encode(tokenizer, texts[k], &doc.ids[k]);
        doc.tokens += static_cast<int64_t>(doc.ids[k].size());
      }
      absl::StrAppend(&joined, texts[k], k + 1 < texts.size() ? absl::string_view("\0", 1) : "");
    }
    if (options.exact_dedup) doc.text_hash = StableHash(joined);
    if (dedup != nullptr && doc.tokens >= options.min_tokens)
      doc.signature = dedup->Signature(joined);
  }
  return out;
}

}  // namespace

absl::StatusOr<PreprocessSummary> RunPreprocess(
    const PreprocessOptions& options,
    const std::function<void(const PreprocessProgress&)>& progress) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("no input files");
  if (options.output_prefix.empty()) return absl::InvalidArgumentError("no output prefix");
  const int workers = std::max(1, options.workers);
  absl::StatusOr<std::unique_ptr<TokenizerPool>> pool = TokenizerPool::Create(options, workers);
  if (!pool.ok()) return pool.status();
  if (options.append_eod && !(*pool)->eod().has_value()) {
    return absl::InvalidArgumentError(
        "--append-eod: the tokenizer has no end-of-document token (<|endoftext|>)");
  }
  PreprocessSummary summary;
  summary.dtype = (*pool)->vocab_size() < 65500 ? IndexedDtype::kUint16 : IndexedDtype::kInt32;
  const std::vector<std::string> keys =
      options.jsonl ? options.json_keys : std::vector<std::string>{"text"};
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : keys) {
    const std::string prefix = absl::StrCat(options.output_prefix, "_", key,
                                            options.split_sentences ? "_sentence" : "_document");
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> writer =
        IndexedDatasetWriter::Create(prefix, summary.dtype);
    if (!writer.ok()) return writer.status();
    writers.push_back(*std::move(writer));
    summary.outputs.push_back(prefix);
  }
  std::unique_ptr<MinHashDeduplicator> dedup;
  if (options.near_dedup) dedup = std::make_unique<MinHashDeduplicator>(options.minhash);
  absl::flat_hash_set<uint64_t> seen_texts;
  std::ofstream dropped_log;
  if (!options.dropped_log.empty()) {
    dropped_log.open(options.dropped_log);
    if (!dropped_log) {
      return absl::InvalidArgumentError(
          absl::StrCat("dropped log ", options.dropped_log, ": cannot be written"));
    }
  }

  const auto start = std::chrono::steady_clock::now();
  BatchReader reader(options);
  std::deque<std::future<ProcessedBatch>> in_flight;
  std::vector<int32_t> sequence;
  auto write = [&](ProcessedBatch batch) -> absl::Status {
    if (!batch.status.ok()) return batch.status;
    for (size_t d = 0; d < batch.documents.size(); ++d) {
      ProcessedDocument& doc = batch.documents[d];
      const int64_t index = summary.progress.documents++;
      const char* reason = nullptr;
      if (doc.tokens < options.min_tokens) {
        ++summary.too_short;
        reason = "too_short";
      } else if (options.exact_dedup && !seen_texts.insert(doc.text_hash).second) {
        ++summary.exact_duplicates;
        reason = "exact_duplicate";
      } else if (dedup != nullptr && dedup->IsNearDuplicateAndRemember(doc.signature)) {
        ++summary.near_duplicates;
        reason = "near_duplicate";
      }
      if (reason != nullptr) {
        if (dropped_log.is_open()) {
          dropped_log << index << '\t' << batch.file << ':' << batch.lines[d] << '\t' << reason
                      << '\n';
        }
        continue;
      }
      ++summary.progress.kept;
      for (size_t k = 0; k < writers.size(); ++k) {
        if (options.split_sentences) {
          std::vector<std::vector<int32_t>>& sentences = doc.sentences[k];
          if (options.append_eod && !sentences.empty()) {
            sentences.back().push_back(*(*pool)->eod());
          }
          for (const std::vector<int32_t>& sentence : sentences) {
            summary.tokens_written += static_cast<int64_t>(sentence.size());
            if (absl::Status s = writers[k]->AddSequence(sentence); !s.ok()) return s;
          }
          writers[k]->EndDocument();
          continue;
        }
        sequence = std::move(doc.ids[k]);
        if (options.append_eod) sequence.push_back(*(*pool)->eod());
        summary.tokens_written += static_cast<int64_t>(sequence.size());
        if (absl::Status s = writers[k]->AddDocument(sequence); !s.ok()) return s;
      }
    }
    summary.progress.bytes_read += batch.bytes;
    summary.progress.dropped = summary.progress.documents - summary.progress.kept;
    summary.progress.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress) progress(summary.progress);
    return absl::OkStatus();
  };
  while (true) {
    RawBatch batch;
    absl::StatusOr<bool> more = reader.Next(&batch);
    if (!more.ok()) return more.status();
    if (!batch.records.empty()) {
      TokenizerPool* tokenizers = pool->get();
      const MinHashDeduplicator* signatures = dedup.get();
      in_flight.push_back(
          std::async(std::launch::async, [&options, tokenizers, signatures, b = std::move(batch)] {
            const int index = tokenizers->Acquire();
            ProcessedBatch result = Process(b, options, *tokenizers, index, signatures);
            tokenizers->Release(index);
            return result;
          }));
    }
    // Batches are written in input order; at most workers + 1 are held.
    while (!in_flight.empty() && (static_cast<int>(in_flight.size()) > workers || !*more)) {
      ProcessedBatch done = in_flight.front().get();
      in_flight.pop_front();
      if (absl::Status s = write(std::move(done)); !s.ok()) {
        for (auto& pending : in_flight) pending.wait();
        return s;
      }
    }
    if (!*more && in_flight.empty()) break;
  }
  for (auto& writer : writers) {
    if (absl::Status s = writer->Finish(); !s.ok()) return s;
  }
  if (dedup != nullptr) summary.dedup_memory_bytes = dedup->memory_bytes();
  summary.dedup_memory_bytes += seen_texts.capacity() * (sizeof(uint64_t) + 1);
  summary.progress.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace mtrain
