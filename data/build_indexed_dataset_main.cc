// build_indexed_dataset: converts a text file into Megatron's indexed dataset format
// (<prefix>.bin + <prefix>.idx) for jobs with data.format = DATA_FORMAT_MMIDIDX.
//
//   build_indexed_dataset --input=corpus.txt --output_prefix=/data/corpus
//       [--document_separator='\n\n']
//
// Documents are split as build_indexed_dataset.h describes; the separator takes C escapes
// ('\n', '\t', '\x1e', ...) and an empty one makes the whole file one document. Prints one
// summary line; exits 1 with the reason on stderr on failure.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "data/build_indexed_dataset.h"

ABSL_FLAG(std::string, input, "", "text file to convert (required)");
ABSL_FLAG(std::string, output_prefix, "",
          "writes PREFIX.bin and PREFIX.idx, replacing existing files (required)");
ABSL_FLAG(std::string, document_separator, "\\n\\n",
          "documents end after runs of this string (C escapes allowed); empty: one document");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "converts a text file into a Megatron indexed dataset (.bin/.idx), byte-tokenized");
  absl::ParseCommandLine(argc, argv);
  const std::string input = absl::GetFlag(FLAGS_input);
  const std::string prefix = absl::GetFlag(FLAGS_output_prefix);
  if (input.empty() || prefix.empty()) {
    std::fprintf(stderr, "build_indexed_dataset: --input and --output_prefix are required\n");
    return 1;
  }
  std::string separator;
  std::string error;
  if (!absl::CUnescape(absl::GetFlag(FLAGS_document_separator), &separator, &error)) {
    std::fprintf(stderr, "build_indexed_dataset: --document_separator: %s\n", error.c_str());
    return 1;
  }
  absl::StatusOr<mtrain::BuildIndexedDatasetSummary> summary =
      mtrain::BuildIndexedDatasetFromText(input, prefix, separator);
  if (!summary.ok()) {
    std::fprintf(stderr, "build_indexed_dataset: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n",
              absl::StrCat("build_indexed_dataset: wrote ", prefix, ".bin and ", prefix,
                           ".idx from ", input, ": ", summary->documents, " documents, ",
                           summary->tokens, " tokens, dtype ", mtrain::DtypeName(summary->dtype))
                  .c_str());
  return 0;
}
