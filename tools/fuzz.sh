#!/usr/bin/env bash
# Fuzzes the coordinator's inputs with libFuzzer (Debian's clang): job spec JSON
# (tests/fuzz/job_spec_json_fuzzer.cc) and the request bytes of its RPCs
# (tests/fuzz/coordinator_rpc_fuzzer.cc), each for a fixed time, under AddressSanitizer and
# UndefinedBehaviorSanitizer. Exits non-zero if a target crashes; the reproducer is left in
# build/fuzz/ (add it to the target's corpus directory once fixed, and the Bazel replay test
# keeps it fixed).
#
#   tools/fuzz.sh                # every target, 60 s each
#   tools/fuzz.sh 300            # 300 s each
#   tools/fuzz.sh 60 job_spec_json
# Targets: job_spec_json, coordinator_rpc, http_message (tools/fuzz_http_message.sh),
# rank_inputs (tools/fuzz_rank_inputs.sh: safetensors and MMIDIDX readers).
#
# Built outside Bazel (whose toolchain is gcc): the sources are the Bazel replay test's own
# (bazel query), compiled with clang++ against Bazel's generated protobuf code and the
# system libraries' pkg-config flags. Objects are cached in build/fuzz/obj.
set -euo pipefail

SECONDS_EACH="${1:-60}"
ONLY="${2:-}"
BAZEL="${BAZEL:-bazel}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/build/fuzz"
cd "$ROOT"

CXX="${CXX:-clang++}"
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz.sh: $CXX not found (Debian: apt-get install clang)" >&2
  exit 2
fi
SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# The system libraries, as WORKSPACE links them.
PKGS="grpc++ protobuf sqlite3 prometheus-cpp-pull prometheus-cpp-core absl_status absl_statusor
  absl_strings absl_str_format absl_flags absl_flags_parse absl_synchronization absl_time
  absl_random_random absl_hash absl_raw_hash_set nlohmann_json"
# shellcheck disable=SC2086
CFLAGS="-std=c++17 -O1 -g -fno-omit-frame-pointer -I. -Ibazel-bin $(pkg-config --cflags $PKGS)"
# shellcheck disable=SC2086
LIBS="$(pkg-config --libs $PKGS) -lgrpc++_reflection -lpthread"

mkdir -p "$OUT/obj"

# Compiles `src` (a path from the repository root) once per change into build/fuzz/obj.
compile() {
  local src="$1" obj="$OUT/obj/${1//\//_}.o"
  if [[ ! -f "$obj" || "$src" -nt "$obj" ]]; then
    # shellcheck disable=SC2086
    "$CXX" $CFLAGS $SANITIZE -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
  fi
  echo "$obj"
}
export -f compile
export CXX CFLAGS SANITIZE OUT

status=0
for target in job_spec_json coordinator_rpc; do
  [[ -n "$ONLY" && "$ONLY" != "$target" ]] && continue
  replay="//tests/fuzz:${target}_fuzzer_replay_test"
  echo "== $target: building"
  if ! "$BAZEL" build --noshow_progress "$replay" >"$OUT/bazel.log" 2>&1; then
    cat "$OUT/bazel.log" >&2
    exit 2
  fi
  # The project's sources the target links (the replay driver left out), then the generated
  # protobuf/gRPC code.
  sources=$("$BAZEL" query --noshow_progress "kind('source file', deps($replay))" 2>/dev/null |
    grep '^//' | grep '\.cc$' | grep -v 'replay_main.cc' | sed -e 's|^//||' -e 's|:|/|' -e 's|^/||')
  generated=$("$BAZEL" query --noshow_progress "kind('generated file', deps($replay))" 2>/dev/null |
    grep '^//' | grep '\.pb\.cc$' | sed -e 's|^//|bazel-bin/|' -e 's|:|/|')
  objects=$(printf '%s\n' $sources $generated tests/fuzz/seed_writer.cc |
    xargs -P "$(nproc)" -I{} bash -c 'compile {}')
  # shellcheck disable=SC2086
  "$CXX" $SANITIZE -fsanitize=fuzzer $objects $LIBS -o "$OUT/$target"

  corpus="$OUT/corpus/$target"
  seeds="$OUT/seeds/$target"
  mkdir -p "$corpus" "$seeds"
  echo "== $target: fuzzing for ${SECONDS_EACH}s"
  # The RPC target's SQLite files go to memory: fsync per job would dominate its speed.
  if ! TEST_TMPDIR="${TEST_TMPDIR:-/dev/shm}" MTRAIN_FUZZ_SEED_DIR="$seeds" "$OUT/$target" -max_total_time="$SECONDS_EACH" \
      -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$OUT/$target-" "$corpus" "$seeds" "tests/fuzz/corpus/$target" \
      2>"$OUT/$target.log"; then
    echo "== $target: CRASH; see $OUT/$target.log and $OUT/$target-crash-*" >&2
    tail -n 40 "$OUT/$target.log" >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ *DONE' \
      "$OUT/$target.log" || true
    echo "== $target: no crash in ${SECONDS_EACH}s ($(ls "$corpus" | wc -l) corpus inputs)"
  fi
done
# Targets with few dependencies have their own small build scripts; run them from here too,
# so this one command fuzzes every input the service takes.
for target in http_message rank_inputs; do
  [[ -n "$ONLY" && "$ONLY" != "$target" ]] && continue
  echo "== $target: tools/fuzz_$target.sh $SECONDS_EACH"
  "tools/fuzz_$target.sh" "$SECONDS_EACH" >"$OUT/$target.log" 2>&1 || {
    echo "== $target: CRASH; see $OUT/$target.log" >&2
    tail -n 40 "$OUT/$target.log" >&2
    status=1
    continue
  }
  echo "== $target: no crash in ${SECONDS_EACH}s"
done
exit $status
