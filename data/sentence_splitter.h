// English sentence boundaries for `preprocess --split-sentences` (Megatron's "_sentence"
// datasets, which BERT's samples pair; Megatron uses NLTK's punkt, which this rule
// approximates without a trained model):
//   - a blank line (two line breaks, white space between them allowed) always ends one;
//   - so does a run of '.', '!' or '?' with any closing quotes or brackets after it
//     (" ' ) ] and the curly quotes), followed by white space, unless the next word starts
//     with a lower-case ASCII letter, or the run is one '.' after an initial (a single
//     letter) or a common abbreviation (Mr Mrs Ms Dr Prof Sr Jr St Mt vs etc e.g i.e No
//     Inc Ltd Co Corp Fig Vol cf al: case-insensitive, "e.g" and "i.e" with their dots);
//   - sentences are trimmed of white space; empty ones are dropped.
//
//   std::vector<absl::string_view> s = SplitSentences("Dr. Who came. He left!");
//   // "Dr. Who came."  "He left!"
#ifndef MTRAIN_DATA_SENTENCE_SPLITTER_H_
#define MTRAIN_DATA_SENTENCE_SPLITTER_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace mtrain {

// Views into `text`, in order.
std::vector<absl::string_view> SplitSentences(absl::string_view text);

}  // namespace mtrain

#endif  // MTRAIN_DATA_SENTENCE_SPLITTER_H_
