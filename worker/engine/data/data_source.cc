#include "worker/engine/data/data_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/engine/data/indexed_dataset.h"
#include "worker/engine/data/text_dataset.h"

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

}  // namespace mtrain
