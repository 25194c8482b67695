// The BERT samples a job trains and validates on (model.family MODEL_FAMILY_BERT): its
// sentence dataset (data.path, DATA_FORMAT_MMIDIDX, made by `preprocess --split-sentences`)
// split by document (data.split), each split's samples built by BertSamples
// (bert_samples.h) with the special ids and word pieces of data.tokenizer's WordPiece
// vocabulary (data.vocab_file or data.tokenizer_json).
//
// A text file (DATA_FORMAT_TEXT: data.path, or the shipped corpus when unset) is made into
// that sentence dataset first, as `preprocess --split-sentences` would (documents separated
// by blank lines, nothing dropped, a vocab.txt read as uncased), into a cache keyed by the
// text's and the vocabulary's bytes: $MTRAIN_CACHE_DIR, else $TMPDIR/mtrain-cache, else
// /tmp/mtrain-cache. The files are written under a temporary name and renamed, so ranks that
// share the cache never read a half-written one.
//
// A RACE file (DATA_FORMAT_RACE) is read and encoded whole on each rank (race_dataset.h).
//
//   ASSIGN_OR_RETURN(BertSplitSamples samples, OpenBertSplitSamples(spec));  // spec resolved
//   BertSample sample;
//   RETURN_IF_ERROR(samples.train->Fill(k, &sample));
#ifndef MTRAIN_DATA_BERT_SPLIT_SAMPLES_H_
#define MTRAIN_DATA_BERT_SPLIT_SAMPLES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/bert_samples.h"
#include "data/indexed_dataset.h"
#include "data/race_dataset.h"
#include "proto/job_spec.pb.h"

namespace mtrain {

struct BertSplitSamples {
  std::unique_ptr<IndexedDataset> dataset;  // declared first: destroyed last (pretraining)
  std::unique_ptr<BertSampleSource> train;
  std::unique_ptr<BertSampleSource> validation;  // only when train.eval_interval > 0
};

// Errors name the field: data.vocab_file / data.tokenizer_json for the vocabulary (and a
// vocabulary larger than model.vocab_size), data.path for the dataset (ids outside the
// vocabulary included, and a text file that cannot be read or cached), data.split for a
// split without a document of two sentences.
// DATA_FORMAT_RACE (model.bert_head BERT_HEAD_MULTIPLE_CHOICE): data.path is a RACE file
// (race_dataset.h) whose passages data.split divides; training shuffles its questions per
// epoch, validation reads them in file order.
absl::StatusOr<BertSplitSamples> OpenBertSplitSamples(const JobSpec& spec);

// Every question of the RACE file at `path`, in file order, encoded with the spec's
// WordPiece vocabulary (`trainctl eval --task race`). Errors name `field` for the file.
absl::StatusOr<std::unique_ptr<RaceSamples>> OpenRaceFile(const JobSpec& spec,
                                                          const std::string& path,
                                                          absl::string_view field);

}  // namespace mtrain

#endif  // MTRAIN_DATA_BERT_SPLIT_SAMPLES_H_
