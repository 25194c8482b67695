#include "data/data_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "data/blended_samples.h"
#include "data/byte_tokenizer.h"
#include "data/document_samples.h"
#include "data/indexed_dataset.h"
#include "data/text_dataset.h"
#include "data/window_samples.h"
#include "spec/data_split.h"

namespace mtrain {
namespace {

constexpr char kCorpusRelativePath[] = "tests/data/shakespeare.txt";
constexpr char kCorpusFileName[] = "shakespeare.txt";
// The workspace name in WORKSPACE: runfiles trees put the main repository under it.
constexpr char kWorkspaceName[] = "mtrain";
// Reading tokens in chunks keeps the vocabulary scan's buffer small.
constexpr int kScanChunkTokens = 1 << 20;

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// "/a/b" -> "/a", "/a" -> "/", "/" -> "" (no parent), "a" -> "".
std::string ParentDir(const std::string& path) {
  if (path.empty() || path == "/") return "";
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : trimmed.substr(0, slash);
}

// `dir`/`relative`, then the same under each parent of `dir` up to the root.
void AddWalkingUp(std::string dir, absl::string_view relative, std::vector<std::string>* out) {
  while (!dir.empty()) {
    out->push_back(JoinPath(dir, relative));
    dir = ParentDir(dir);
  }
}

bool IsRegularFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Keeps the code, prefixes the message: the job spec field is what the user can fix.
absl::Status InField(const absl::Status& status, absl::string_view field) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

}  // namespace

CorpusSearchContext CurrentCorpusSearchContext() {
  CorpusSearchContext context;
  context.data_dir = GetEnv("MTRAIN_DATA_DIR");
  context.runfiles_dir = GetEnv("RUNFILES_DIR");
  context.test_srcdir = GetEnv("TEST_SRCDIR");
  std::error_code error;
  const std::filesystem::path cwd = std::filesystem::current_path(error);
  if (!error) context.cwd = cwd.string();
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) context.executable = exe.string();
  return context;
}

std::vector<std::string> DefaultCorpusCandidates(const CorpusSearchContext& context) {
  const std::string in_runfiles = JoinPath(kWorkspaceName, kCorpusRelativePath);
  std::vector<std::string> candidates;
  if (!context.data_dir.empty()) candidates.push_back(JoinPath(context.data_dir, kCorpusFileName));
  AddWalkingUp(context.cwd, kCorpusRelativePath, &candidates);
  if (!context.runfiles_dir.empty()) {
    candidates.push_back(JoinPath(context.runfiles_dir, in_runfiles));
  }
  if (!context.test_srcdir.empty())
    candidates.push_back(JoinPath(context.test_srcdir, in_runfiles));
  if (!context.executable.empty()) {
    candidates.push_back(JoinPath(context.executable + ".runfiles", in_runfiles));
    AddWalkingUp(ParentDir(context.executable), kCorpusRelativePath, &candidates);
  }
  // The cwd and the executable often share ancestors; each place is listed once.
  std::vector<std::string> unique;
  for (std::string& candidate : candidates) {
    if (std::find(unique.begin(), unique.end(), candidate) == unique.end()) {
      unique.push_back(std::move(candidate));
    }
  }
  return unique;
}

absl::StatusOr<std::string> FindDefaultCorpus(const CorpusSearchContext& context) {
  const std::vector<std::string> candidates = DefaultCorpusCandidates(context);
  for (const std::string& candidate : candidates) {
    if (IsRegularFile(candidate)) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("the shipped corpus ", kCorpusRelativePath,
                   " was not found (set data.path, or MTRAIN_DATA_DIR to the directory holding ",
                   kCorpusFileName, "); tried: ", absl::StrJoin(candidates, ", ")));
}

absl::StatusOr<std::string> FindDefaultCorpus() {
  return FindDefaultCorpus(CurrentCorpusSearchContext());
}

namespace {

// data.tokenizer's BPE, or none for the byte tokenizer.
absl::StatusOr<std::optional<BpeTokenizer>> OpenTokenizer(const DataSpec& spec) {
  switch (spec.tokenizer()) {
    case TOKENIZER_UNSPECIFIED:
    case TOKENIZER_BYTE:
      return std::optional<BpeTokenizer>();
    case TOKENIZER_GPT2_BPE: {
      absl::StatusOr<BpeTokenizer> t =
          BpeTokenizer::FromVocabAndMerges(spec.vocab_file(), spec.merge_file());
      if (!t.ok()) return InField(t.status(), "data.vocab_file, data.merge_file");
      return std::optional<BpeTokenizer>(*std::move(t));
    }
    case TOKENIZER_HF_JSON: {
      absl::StatusOr<BpeTokenizer> t = BpeTokenizer::FromHuggingFaceJson(spec.tokenizer_json());
      if (!t.ok()) return InField(t.status(), "data.tokenizer_json");
      return std::optional<BpeTokenizer>(*std::move(t));
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "data.tokenizer: ", spec.tokenizer(),
          " is not supported (TOKENIZER_BYTE, TOKENIZER_GPT2_BPE or TOKENIZER_HF_JSON)"));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDataset>> OpenDataset(const DataSpec& spec) {
  switch (spec.format()) {
    case DATA_FORMAT_UNSPECIFIED:
    case DATA_FORMAT_TEXT: {
      std::string path = spec.path();
      if (path.empty()) {
        absl::StatusOr<std::string> found = FindDefaultCorpus();
        if (!found.ok()) return InField(found.status(), "data.path (unset)");
        path = *std::move(found);
      }
      absl::StatusOr<std::optional<BpeTokenizer>> tokenizer = OpenTokenizer(spec);
      if (!tokenizer.ok()) return tokenizer.status();
      absl::StatusOr<std::unique_ptr<TextDataset>> text =
          TextDataset::Open(path, tokenizer->has_value() ? &**tokenizer : nullptr);
      if (!text.ok()) return InField(text.status(), "data.path");
      return std::unique_ptr<TokenDataset>(*std::move(text));
    }
    case DATA_FORMAT_MMIDIDX: {
      if (spec.path().empty()) {
        return absl::InvalidArgumentError(
            "data.path: required with DATA_FORMAT_MMIDIDX (the prefix of PREFIX.bin and "
            "PREFIX.idx)");
      }
      absl::StatusOr<std::unique_ptr<IndexedDataset>> indexed = IndexedDataset::Open(spec.path());
      if (!indexed.ok()) return InField(indexed.status(), "data.path");
      return std::unique_ptr<TokenDataset>(*std::move(indexed));
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("data.format: ", spec.format(),
                       " is not supported (DATA_FORMAT_TEXT or DATA_FORMAT_MMIDIDX)"));
  }
}

absl::Status CheckTokensFitVocab(const TokenDataset& dataset, int vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.vocab_size: ", vocab_size, " must be > 0"));
  }
  if (dataset.vocab_upper_bound() <= vocab_size) return absl::OkStatus();
  std::vector<int32_t> chunk;
  for (int64_t offset = 0; offset < dataset.size(); offset += kScanChunkTokens) {
    const int length =
        static_cast<int>(std::min<int64_t>(kScanChunkTokens, dataset.size() - offset));
    chunk.resize(length);
    absl::Status read = dataset.Read(offset, length, chunk.data());
    if (!read.ok()) return InField(read, "data.path");
    for (int i = 0; i < length; ++i) {
      if (chunk[i] < 0 || chunk[i] >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("data.path: ", dataset.source(), " holds token id ", chunk[i],
                         " at token offset ", offset + i, ", which does not fit model.vocab_size (",
                         vocab_size, ") [rule: 0 <= token id < model.vocab_size]"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// One split of one indexed dataset, Megatron's way.
absl::StatusOr<std::unique_ptr<SampleSource>> IndexedSplit(const IndexedDataset* data,
                                                           const DataSplit& split, SplitKind kind,
                                                           const JobSpec& spec) {
  DocumentSamplesOptions options;
  options.seq_length = spec.model().seq_length();
  options.seed = spec.train().seed();
  options.split = kind;
  options.documents = SplitBoundaries(split, data->num_sequences(), kind);
  ASSIGN_OR_RETURN(std::unique_ptr<DocumentSamples> samples,
                   DocumentSamples::Create(data, options));
  return std::unique_ptr<SampleSource>(std::move(samples));
}

// The split `kind` of every dataset, blended when there are several.
absl::StatusOr<std::unique_ptr<SampleSource>> SplitOf(
    const std::vector<const IndexedDataset*>& data, const std::vector<double>& weights,
    const std::vector<std::string>& names, const DataSplit& split, SplitKind kind,
    const JobSpec& spec) {
  std::vector<std::unique_ptr<SampleSource>> sources;
  for (const IndexedDataset* d : data) {
    ASSIGN_OR_RETURN(std::unique_ptr<SampleSource> one, IndexedSplit(d, split, kind, spec));
    sources.push_back(std::move(one));
  }
  if (sources.size() == 1 && weights.empty()) return std::move(sources.front());
  ASSIGN_OR_RETURN(std::unique_ptr<BlendedSamples> blend,
                   BlendedSamples::Create(std::move(sources), weights, names));
  return std::unique_ptr<SampleSource>(std::move(blend));
}

}  // namespace

absl::StatusOr<SpecTokenizer> OpenSpecTokenizer(const DataSpec& spec) {
  ASSIGN_OR_RETURN(std::optional<BpeTokenizer> bpe, OpenTokenizer(spec));
  SpecTokenizer tokenizer;
  if (!bpe.has_value()) {
    tokenizer.encode = [](absl::string_view text) { return ByteTokenizer::Encode(text); };
    tokenizer.decode = [](const std::vector<int32_t>& ids) {
      std::string text;
      for (int32_t id : ids) {
        if (id >= 0 && id < 256) {
          text.push_back(static_cast<char>(id));
        } else {
          text += "\xEF\xBF\xBD";  // a vocabulary padded past 256: no byte
        }
      }
      return text;
    };
    return tokenizer;
  }
  auto shared = std::make_shared<const BpeTokenizer>(*std::move(bpe));
  tokenizer.encode = [shared](absl::string_view text) { return shared->Encode(text); };
  tokenizer.decode = [shared](const std::vector<int32_t>& ids) {
    absl::StatusOr<std::string> text = shared->Decode(ids);
    return text.ok() ? *text : std::string("\xEF\xBF\xBD");
  };
  tokenizer.end_of_document = shared->end_of_document_id();
  return tokenizer;
}

absl::StatusOr<SplitSamples> OpenSplitSamples(const JobSpec& spec) {
  const DataSpec& data = spec.data();
  ASSIGN_OR_RETURN(const DataSplit split,
                   ParseDataSplit(data.has_split() ? data.split() : kDefaultDataSplit));
  const bool validate = spec.train().eval_interval() > 0;
  const int seq_length = spec.model().seq_length();
  SplitSamples out;
  if (data.paths().empty() && data.format() != DATA_FORMAT_MMIDIDX) {
    // A text stream: split by token ranges.
    ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> text, OpenDataset(data));
    RETURN_IF_ERROR(CheckTokensFitVocab(*text, spec.model().vocab_size()));
    const TokenDataset* stream = text.get();
    out.datasets.push_back(std::move(text));
    ASSIGN_OR_RETURN(
        out.train,
        RandomWindowSamples::Create(
            stream, SplitBoundaries(split, stream->size(), SplitKind::kTrain), SplitKind::kTrain,
            seq_length, spec.train().seed(), spec.parallel().global_batch_size()));
    if (validate) {
      ASSIGN_OR_RETURN(out.validation,
                       SequentialWindowSamples::Create(
                           stream, SplitBoundaries(split, stream->size(), SplitKind::kValidation),
                           SplitKind::kValidation, seq_length));
    }
    return out;
  }
  // Indexed datasets: data.path alone, or the blend.
  std::vector<const IndexedDataset*> indexed;
  std::vector<double> weights;
  std::vector<std::string> names;
  const auto open = [&](const std::string& prefix, absl::string_view field) -> absl::Status {
    absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::Open(prefix);
    if (!opened.ok()) return InField(opened.status(), field);
    absl::Status fits = CheckTokensFitVocab(**opened, spec.model().vocab_size());
    if (!fits.ok()) {
      // CheckTokensFitVocab names data.path; a blend's dataset is one of data.paths.
      return field == "data.path" ? fits
                                  : absl::InvalidArgumentError(absl::StrCat(
                                        field, absl::StripPrefix(fits.message(), "data.path")));
    }
    indexed.push_back(opened->get());
    out.datasets.push_back(std::move(*opened));
    return absl::OkStatus();
  };
  if (data.paths().empty()) {
    if (data.path().empty()) {
      return absl::InvalidArgumentError(
          "data.path: required with DATA_FORMAT_MMIDIDX (the prefix of PREFIX.bin and "
          "PREFIX.idx), or data.paths for a blend");
    }
    RETURN_IF_ERROR(open(data.path(), "data.path"));
  } else {
    for (const WeightedDataPath& entry : data.paths()) {
      RETURN_IF_ERROR(open(entry.path(), "data.paths"));
      weights.push_back(entry.weight());
      names.push_back(entry.path());
    }
  }
  ASSIGN_OR_RETURN(out.train, SplitOf(indexed, weights, names, split, SplitKind::kTrain, spec));
  if (const auto* blend = dynamic_cast<const BlendedSamples*>(out.train.get()); blend != nullptr) {
    const int64_t total = int64_t{spec.train().steps()} * spec.parallel().global_batch_size();
    const std::vector<int64_t> counts = blend->CountsBefore(total);
    const std::vector<int64_t> megatron =
        MegatronSizesPerDataset(blend->normalized_weights(), total);
    out.blend_note = absl::StrCat("blend: ", total, " train samples:");
    for (size_t d = 0; d < counts.size(); ++d) {
      absl::StrAppend(&out.blend_note, d == 0 ? " " : ", ", names[d], " ", counts[d],
                      " (Megatron builds ", megatron[d], ")");
    }
  }
  if (validate) {
    ASSIGN_OR_RETURN(out.validation,
                     SplitOf(indexed, weights, names, split, SplitKind::kValidation, spec));
  }
  return out;
}

}  // namespace mtrain
