// Opens the dataset a job's DataSpec names, and checks it against the model's vocabulary.
//
// An unset or empty data.path with DATA_FORMAT_TEXT means the corpus shipped in the
// repository, tests/data/shakespeare.txt, searched in this order:
//   1. $MTRAIN_DATA_DIR/shakespeare.txt, when MTRAIN_DATA_DIR is set;
//   2. tests/data/shakespeare.txt under the current directory and each of its parents;
//   3. the Bazel runfiles: $RUNFILES_DIR/mtrain/tests/data/shakespeare.txt, then
//      $TEST_SRCDIR/mtrain/tests/data/shakespeare.txt;
//   4. next to the executable (/proc/self/exe): <exe>.runfiles/mtrain/tests/data/
//      shakespeare.txt, then tests/data/shakespeare.txt under each directory above it.
// The first that exists wins, so a worker finds it run from the repository, from bazel-bin,
// or under `bazel test` / `bazel run`.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> data, OpenDataset(spec.data()));
//   RETURN_IF_ERROR(CheckTokensFitVocab(*data, spec.model().vocab_size()));
#ifndef MTRAIN_DATA_DATA_SOURCE_H_
#define MTRAIN_DATA_DATA_SOURCE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/sample_source.h"
#include "data/token_dataset.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

// The inputs of the corpus search, separated from the process so tests can vary them.
struct CorpusSearchContext {
  std::string data_dir;      // $MTRAIN_DATA_DIR, or empty
  std::string cwd;           // the current directory
  std::string runfiles_dir;  // $RUNFILES_DIR, or empty
  std::string test_srcdir;   // $TEST_SRCDIR, or empty
  std::string executable;    // the resolved /proc/self/exe, or empty
};

// The context of this process.
CorpusSearchContext CurrentCorpusSearchContext();

// Every place searched, in order, without duplicates.
std::vector<std::string> DefaultCorpusCandidates(const CorpusSearchContext& context);

// The first candidate that is a regular file. NOT_FOUND listing every place tried.
absl::StatusOr<std::string> FindDefaultCorpus(const CorpusSearchContext& context);
absl::StatusOr<std::string> FindDefaultCorpus();

// TEXT (or unspecified) -> TextDataset, MMIDIDX -> IndexedDataset (data.path is the prefix
// and required). INVALID_ARGUMENT for a tokenizer or format this build does not know;
// otherwise the opener's errors, prefixed with "data.path: ".
absl::StatusOr<std::unique_ptr<TokenDataset>> OpenDataset(const DataSpec& spec);

// The samples a job trains and validates on, and the datasets they read (declared first,
// so destroyed last).
struct SplitSamples {
  std::vector<std::unique_ptr<TokenDataset>> datasets;
  std::unique_ptr<SampleSource> train;
  // Only when train.eval_interval > 0.
  std::unique_ptr<SampleSource> validation;
  // For a blend: how many of the run's train samples (train.steps x global batch) each
  // dataset gives, beside the sizes Megatron would build for them.
  std::string blend_note;
};

// Opens the spec's data (data.path or the blend data.paths), checks every token against
// model.vocab_size, and builds the split's samples (`spec` resolved):
//   TEXT       one token stream split by token ranges (data.split): training windows drawn
//              with replacement (window_samples.h), validation windows read in order;
//   MMIDIDX    documents split by data.split, Megatron's GPT sampling for each split
//              (document_samples.h: per-epoch shuffles, index cached beside the dataset);
//   a blend    each dataset split on its own, the splits blended by weight
//              (blended_samples.h).
// Errors name the field: data.path / data.paths for files, data.split for a split too
// small for one sample.
absl::StatusOr<SplitSamples> OpenSplitSamples(const JobSpec& spec);

// data.tokenizer both ways, for evaluation and generation: the byte tokenizer, or the BPE
// its files give (errors as OpenDataset's, naming the field). Self-contained (it shares
// one loaded tokenizer) and may outlive `spec`.
struct SpecTokenizer {
  std::function<std::vector<int32_t>(absl::string_view)> encode;
  // Ids -> text; an id with no text (a byte-tokenizer id past 255, a BPE id it does not
  // know) reads as U+FFFD.
  std::function<std::string(const std::vector<int32_t>&)> decode;
  std::optional<int32_t> end_of_document;  // when the tokenizer has one
};
absl::StatusOr<SpecTokenizer> OpenSpecTokenizer(const DataSpec& spec);

// INVALID_ARGUMENT, naming data.path and model.vocab_size, if some token id is negative or
// >= vocab_size. Free when dataset.vocab_upper_bound() <= vocab_size (always so for the
// byte tokenizer with the default 256); otherwise reads every token once.
absl::Status CheckTokensFitVocab(const TokenDataset& dataset, int vocab_size);

}  // namespace mtrain

#endif  // MTRAIN_DATA_DATA_SOURCE_H_
