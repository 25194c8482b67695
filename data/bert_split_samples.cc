#include "data/bert_split_samples.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "data/data_source.h"
#include "data/preprocess.h"
#include "spec/data_split.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace mtrain {
namespace {

absl::Status Prefixed(const absl::Status& status, absl::string_view field) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

absl::StatusOr<WordPieceTokenizer> OpenWordPiece(const DataSpec& data) {
  if (data.has_vocab_file()) {
    absl::StatusOr<WordPieceTokenizer> t =
        WordPieceTokenizer::FromVocabTxt(data.vocab_file(), BertNormalizerOptions{});
    if (!t.ok()) return Prefixed(t.status(), "data.vocab_file");
    return t;
  }
  absl::StatusOr<WordPieceTokenizer> t =
      WordPieceTokenizer::FromHuggingFaceJson(data.tokenizer_json());
  if (!t.ok()) return Prefixed(t.status(), "data.tokenizer_json");
  return t;
}

// FNV-1a over a file's bytes, folded into `hash`: the cache key (stable across builds and
// machines, unlike std::hash). NOT_FOUND naming the file when it cannot be read.
absl::Status HashFile(const std::string& path, uint64_t* hash) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      *hash = (*hash ^ static_cast<unsigned char>(buffer[i])) * 0x100000001b3ULL;
    }
  }
  return absl::OkStatus();
}

std::string CacheDirectory() {
  if (const char* dir = std::getenv("MTRAIN_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/mtrain-cache");
}

// The sentence dataset of a text file (see the header): its prefix in the cache.
absl::StatusOr<std::string> SentenceDatasetOfText(const DataSpec& data) {
  std::string text = data.path();
  if (text.empty()) {
    absl::StatusOr<std::string> found = FindDefaultCorpus();
    if (!found.ok()) return Prefixed(found.status(), "data.path");
    text = *found;
  }
  const std::string& vocabulary = data.has_vocab_file() ? data.vocab_file() : data.tokenizer_json();
  uint64_t hash = 0xcbf29ce484222325ULL;
  if (absl::Status s = HashFile(text, &hash); !s.ok()) return Prefixed(s, "data.path");
  hash ^= 0xff;  // the boundary between the two files
  if (absl::Status s = HashFile(vocabulary, &hash); !s.ok()) {
    return Prefixed(s, data.has_vocab_file() ? "data.vocab_file" : "data.tokenizer_json");
  }
  const std::string dir = CacheDirectory();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("data.path: cannot create the cache directory ", dir, ": ", error.message()));
  }
  const std::string prefix = absl::StrFormat("%s/bert-%016x", dir, hash);
  if (std::filesystem::exists(prefix + ".idx") && std::filesystem::exists(prefix + ".bin")) {
    return prefix;
  }
  PreprocessOptions options;
  options.inputs = {text};
  options.jsonl = false;
  options.output_prefix = absl::StrFormat("%s.tmp-%d", prefix, static_cast<int>(getpid()));
  if (data.has_vocab_file()) {
    options.tokenizer = PreprocessTokenizer::kBertVocab;
    options.vocab_file = data.vocab_file();
  } else {
    options.tokenizer = PreprocessTokenizer::kHuggingFaceJson;
    options.tokenizer_json = data.tokenizer_json();
  }
  options.split_sentences = true;
  options.min_tokens = 0;
  options.exact_dedup = false;
  options.near_dedup = false;
  absl::StatusOr<PreprocessSummary> done = RunPreprocess(options);
  if (!done.ok()) return Prefixed(done.status(), "data.path");
  // One output: the text key's sentences.
  const std::string written = options.output_prefix + "_text_sentence";
  // The index last: a reader that sees it sees the data too.
  std::filesystem::rename(written + ".bin", prefix + ".bin", error);
  if (!error) std::filesystem::rename(written + ".idx", prefix + ".idx", error);
  if (error) {
    return absl::InternalError(absl::StrCat("data.path: cannot move the sentence dataset into ",
                                            dir, ": ", error.message()));
  }
  return prefix;
}

// The spec's WordPiece vocabulary, no larger than model.vocab_size.
absl::StatusOr<WordPieceTokenizer> OpenSpecWordPiece(const JobSpec& spec) {
  const DataSpec& data = spec.data();
  const char* vocab_field = data.has_vocab_file() ? "data.vocab_file" : "data.tokenizer_json";
  ASSIGN_OR_RETURN(WordPieceTokenizer tokenizer, OpenWordPiece(data));
  const int vocab_size = spec.model().vocab_size();
  if (tokenizer.vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_field, ": the WordPiece vocabulary holds ", tokenizer.vocab_size(),
                     " entries, more than model.vocab_size ", vocab_size,
                     " [rule: model.vocab_size >= the vocabulary's size (BERT's: 30522)]"));
  }
  return tokenizer;
}

absl::StatusOr<std::vector<RacePassage>> ReadRace(const std::string& path,
                                                  absl::string_view field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(field, ": cannot read ", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::vector<RacePassage>> passages = ParseRace(text, path);
  if (!passages.ok()) return Prefixed(passages.status(), field);
  return passages;
}

RaceSamplesOptions RaceOptions(const JobSpec& spec, const WordPieceTokenizer& tokenizer) {
  RaceSamplesOptions options;
  options.seq_length = spec.model().seq_length();
  options.special = {tokenizer.cls_id(), tokenizer.sep_id(), tokenizer.mask_id(),
                     tokenizer.pad_id()};
  options.vocab_size = tokenizer.vocab_size();
  options.seed = spec.train().seed();
  return options;
}

RaceEncoder EncoderOf(const WordPieceTokenizer& tokenizer) {
  return [&tokenizer](absl::string_view text) { return tokenizer.Encode(text); };
}

// data.format DATA_FORMAT_RACE: the file's passages split by data.split.
absl::StatusOr<BertSplitSamples> OpenRaceSplitSamples(const JobSpec& spec,
                                                      const WordPieceTokenizer& tokenizer) {
  ASSIGN_OR_RETURN(const std::vector<RacePassage> passages,
                   ReadRace(spec.data().path(), "data.path"));
  const DataSpec& data = spec.data();
  ASSIGN_OR_RETURN(const DataSplit split,
                   ParseDataSplit(data.has_split() ? data.split() : kDefaultDataSplit));
  BertSplitSamples out;
  const auto open = [&](SplitKind kind) -> absl::StatusOr<std::unique_ptr<BertSampleSource>> {
    const SplitRange range = SplitBoundaries(split, static_cast<int64_t>(passages.size()), kind);
    RaceSamplesOptions options = RaceOptions(spec, tokenizer);
    options.shuffle = kind == SplitKind::kTrain;
    options.name = SplitKindName(kind);
    absl::StatusOr<std::unique_ptr<RaceSamples>> samples = RaceSamples::Create(
        EncodeRace(passages, EncoderOf(tokenizer), range.begin, range.end), options);
    if (!samples.ok()) {
      return Prefixed(samples.status(), absl::StrCat("data.split (", SplitKindName(kind), " of ",
                                                     passages.size(), " passages)"));
    }
    return std::unique_ptr<BertSampleSource>(*std::move(samples));
  };
  ASSIGN_OR_RETURN(out.train, open(SplitKind::kTrain));
  if (spec.train().eval_interval() > 0) {
    ASSIGN_OR_RETURN(out.validation, open(SplitKind::kValidation));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RaceSamples>> OpenRaceFile(const JobSpec& spec,
                                                          const std::string& path,
                                                          absl::string_view field) {
  ASSIGN_OR_RETURN(const WordPieceTokenizer tokenizer, OpenSpecWordPiece(spec));
  ASSIGN_OR_RETURN(const std::vector<RacePassage> passages, ReadRace(path, field));
  RaceSamplesOptions options = RaceOptions(spec, tokenizer);
  options.shuffle = false;
  options.name = path;
  absl::StatusOr<std::unique_ptr<RaceSamples>> samples =
      RaceSamples::Create(EncodeRace(passages, EncoderOf(tokenizer)), options);
  if (!samples.ok()) return Prefixed(samples.status(), field);
  return samples;
}

absl::StatusOr<BertSplitSamples> OpenBertSplitSamples(const JobSpec& spec) {
  const DataSpec& data = spec.data();
  ASSIGN_OR_RETURN(const WordPieceTokenizer tokenizer, OpenSpecWordPiece(spec));
  if (data.format() == DATA_FORMAT_RACE) return OpenRaceSplitSamples(spec, tokenizer);
  BertSplitSamples out;
  std::string prefix = data.path();
  if (data.format() != DATA_FORMAT_MMIDIDX) {
    ASSIGN_OR_RETURN(prefix, SentenceDatasetOfText(data));
  }
  absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::Open(prefix);
  if (!opened.ok()) return Prefixed(opened.status(), "data.path");
  out.dataset = *std::move(opened);
  RETURN_IF_ERROR(CheckTokensFitVocab(*out.dataset, tokenizer.vocab_size()));
  ASSIGN_OR_RETURN(const DataSplit split,
                   ParseDataSplit(data.has_split() ? data.split() : kDefaultDataSplit));

  BertSamplesOptions options;
  options.seq_length = spec.model().seq_length();
  options.seed = spec.train().seed();
  options.special = {tokenizer.cls_id(), tokenizer.sep_id(), tokenizer.mask_id(),
                     tokenizer.pad_id()};
  options.vocab_size = tokenizer.vocab_size();
  options.continues_word = tokenizer.ContinuesWord();
  const auto open = [&](SplitKind kind) -> absl::StatusOr<std::unique_ptr<BertSampleSource>> {
    BertSamplesOptions o = options;
    o.documents = SplitBoundaries(split, out.dataset->num_documents(), kind);
    absl::StatusOr<std::unique_ptr<BertSamples>> samples =
        BertSamples::Create(out.dataset.get(), o);
    if (!samples.ok()) {
      return Prefixed(samples.status(), absl::StrCat("data.split (", SplitKindName(kind), ")"));
    }
    return std::unique_ptr<BertSampleSource>(*std::move(samples));
  };
  ASSIGN_OR_RETURN(out.train, open(SplitKind::kTrain));
  if (spec.train().eval_interval() > 0) {
    ASSIGN_OR_RETURN(out.validation, open(SplitKind::kValidation));
  }
  return out;
}

}  // namespace mtrain
