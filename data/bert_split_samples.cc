#include "data/bert_split_samples.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/data_source.h"
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

}  // namespace

absl::StatusOr<BertSplitSamples> OpenBertSplitSamples(const JobSpec& spec) {
  const DataSpec& data = spec.data();
  const char* vocab_field = data.has_vocab_file() ? "data.vocab_file" : "data.tokenizer_json";
  ASSIGN_OR_RETURN(const WordPieceTokenizer tokenizer, OpenWordPiece(data));
  const int vocab_size = spec.model().vocab_size();
  if (tokenizer.vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(vocab_field, ": the WordPiece vocabulary holds ", tokenizer.vocab_size(),
                     " entries, more than model.vocab_size ", vocab_size,
                     " [rule: model.vocab_size >= the vocabulary's size (BERT's: 30522)]"));
  }
  BertSplitSamples out;
  absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::Open(data.path());
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
  const auto open = [&](SplitKind kind) -> absl::StatusOr<std::unique_ptr<BertSamples>> {
    BertSamplesOptions o = options;
    o.documents = SplitBoundaries(split, out.dataset->num_documents(), kind);
    absl::StatusOr<std::unique_ptr<BertSamples>> samples =
        BertSamples::Create(out.dataset.get(), o);
    if (!samples.ok()) {
      return Prefixed(samples.status(), absl::StrCat("data.split (", SplitKindName(kind), ")"));
    }
    return samples;
  };
  ASSIGN_OR_RETURN(out.train, open(SplitKind::kTrain));
  if (spec.train().eval_interval() > 0) {
    ASSIGN_OR_RETURN(out.validation, open(SplitKind::kValidation));
  }
  return out;
}

}  // namespace mtrain
