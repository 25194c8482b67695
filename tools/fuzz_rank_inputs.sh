#!/usr/bin/env bash
# Fuzzes the readers of the files a rank reads on a user's behalf (safetensors for
# train.init_from, MMIDIDX for data.path: worker/engine/rank_input_fuzz.cc) with libFuzzer
# from Debian's clang, under AddressSanitizer and UBSan, for SECONDS (default 60); exits
# non-zero, with the crashing input saved in the temporary directory it names, if any
# input crashes a reader or breaks a promise of its header.
#
#   tools/fuzz_rank_inputs.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_rank_inputs.XXXXXX")
# shellcheck disable=SC2046  # pkg-config prints several flags
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. worker/engine/rank_input_fuzz.cc checkpoint/safetensors.cc checkpoint/file_io.cc \
  data/indexed_dataset.cc data/indexed_dataset_format.cc \
  data/mapped_file.cc data/token_dataset.cc \
  $(pkg-config --cflags --libs protobuf absl_strings absl_str_format absl_status \
    absl_statusor) -o "$work/fuzz"
# Seeds: a valid safetensors file and a valid two-sequence uint16 dataset.
mkdir -p "$work/corpus"
header='{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
{ printf '\x00'; printf "\\x$(printf %02x ${#header})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
  printf '%s' "$header"; printf '\x00\x00\x80\x3f\x00\x00\x00\x40'; } >"$work/corpus/safetensors"
{ printf '\x01\x52\x00'                                      # MMIDIDX, .idx of 82 bytes
  printf 'MMIDIDX\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x08' # magic, version 1, uint16
  printf '\x02\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00'  # 2 seqs, 3 docs
  printf '\x02\x00\x00\x00\x01\x00\x00\x00'                    # lengths 2, 1
  printf '\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00'  # pointers
  printf '\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00'  # documents
  printf '\x02\x00\x00\x00\x00\x00\x00\x00'
  printf '\x01\x00\x02\x00\x03\x00'; } >"$work/corpus/mmidx"       # .bin: tokens 1 2 3
echo "fuzz_rank_inputs.sh: ${seconds} s in $work"
FUZZ_TMPDIR="$work" "$work/fuzz" -max_total_time="$seconds" -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus"
rm -rf "$work"
