#!/usr/bin/env bash
# Fuzzes the coordinator's HTTP port (coordinator/http_message_fuzz.cc: each input sent to
# a live HttpServer, libmicrohttpd and this project's glue, on loopback) with libFuzzer
# from Debian's clang, under AddressSanitizer and UBSan, for SECONDS (default 60); exits
# non-zero, with the crashing input saved in the temporary directory it names, if any
# input crashes it, hangs it or breaks an invariant.
#
#   tools/fuzz_http_message.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_http_message.XXXXXX")
# shellcheck disable=SC2046  # pkg-config prints several flags
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. coordinator/http_message_fuzz.cc coordinator/http_server.cc \
  $(pkg-config --cflags --libs libmicrohttpd absl_strings absl_status absl_statusor \
    absl_raw_hash_set absl_hash) -lpthread -o "$work/fuzz"
mkdir -p "$work/corpus"
printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >"$work/corpus/metrics"
printf 'GET /api/jobs/j%%2D1/../steps?after=3 HTTP/1.0\n\n' >"$work/corpus/dots"
printf 'HEAD / HTTP/1.1\r\n\r\n' >"$work/corpus/head"
printf 'POST /api/jobs HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}' >"$work/corpus/post"
printf 'GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' \
  >"$work/corpus/chunked"
echo "fuzz_http_message.sh: ${seconds} s in $work"
"$work/fuzz" -max_total_time="$seconds" -max_len=20000 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus"
rm -rf "$work"
