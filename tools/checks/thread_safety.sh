#!/usr/bin/env bash
# Checks the lock annotations of the coordinator and common/ with clang's thread-safety
# analysis: a member marked ABSL_GUARDED_BY(mutex_) touched without mutex_ held, or a
# helper marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) called without it, is an error.
# The Bazel build uses GCC, which ignores the annotations; this compiles every .cc under
# the checked folders with clang++ -fsyntax-only (no objects) and exits non-zero on any
# warning. Locks are common/mutex.h's Mutex/MutexLock/CondVar (std::mutex underneath, so
# that TSan still sees them).
#
# First it proves it can fail: tools/checks/testdata/thread_safety_violation.cc reads a
# guarded member without its lock and must be refused. By hand:
#   clang++ -std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. \
#     tools/checks/testdata/thread_safety_violation.cc
#   ... error: reading variable 'count_' requires holding mutex 'mutex_' [-Werror,-Wthread-safety-analysis]
#
# Generated protobuf headers come from Bazel (bazel-bin/), built here first.
#   tools/checks/thread_safety.sh            # the checked folders
#   tools/checks/thread_safety.sh FILE.cc    # just these files
set -euo pipefail
cd "$(dirname "$0")/../.."

CXX="${CXX:-clang++}"
BAZEL="${BAZEL:-bazel}"
if ! command -v "$CXX" >/dev/null; then
  echo "thread_safety.sh: $CXX not found (Debian: apt-get install clang)" >&2
  exit 2
fi
# The folders whose code takes locks through common/mutex.h.
DIRS=(coordinator common)

PKGS="grpc++ protobuf sqlite3 prometheus-cpp-pull prometheus-cpp-core absl_status absl_statusor
  absl_strings absl_str_format absl_flags absl_synchronization absl_time"
# shellcheck disable=SC2086
FLAGS="-std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. -Ibazel-bin
  $(pkg-config --cflags $PKGS)"
export CXX FLAGS

# 1. The check must catch a violation, or a pass below means nothing.
# shellcheck disable=SC2086
if out=$("$CXX" $FLAGS tools/checks/testdata/thread_safety_violation.cc 2>&1); then
  echo "thread_safety.sh: the deliberate violation compiled cleanly: the analysis is off" >&2
  exit 1
fi
if ! grep -q 'Wthread-safety' <<<"$out"; then
  echo "thread_safety.sh: the deliberate violation failed for another reason:" >&2
  echo "$out" >&2
  exit 1
fi

# 2. Generated headers the sources include.
"$BAZEL" build --noshow_progress //proto:all //dashboard/status:status_page_assets \
  >/dev/null 2>&1 || {
  echo "thread_safety.sh: bazel build of the generated headers failed" >&2
  exit 2
}

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(find "${DIRS[@]}" -name '*.cc' | sort)
fi
# One line per file, "OK path" or the diagnostics; any warning or error fails the check.
check_one() {
  # shellcheck disable=SC2086
  if out=$("$CXX" $FLAGS "$1" 2>&1) && [[ -z "$out" ]]; then
    echo "OK $1"
  else
    printf 'FAIL %s\n%s\n' "$1" "$out"
  fi
}
export -f check_one
report=$(printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} bash -c 'check_one {}')
failed=$(grep -c '^FAIL ' <<<"$report" || true)
grep -v '^OK ' <<<"$report" || true
echo "thread_safety.sh: ${#files[@]} files checked, $failed with findings"
[[ "$failed" -eq 0 ]]
