#!/usr/bin/env bash
# Checks the project's lock annotations with clang's thread-safety analysis: a member
# marked ABSL_GUARDED_BY(mutex_) touched without mutex_ held, or a helper marked
# ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) called without it, is an error. The Bazel build
# uses GCC, which ignores the annotations; this compiles the sources that take locks with
# clang++ -fsyntax-only (no objects), in parallel, and exits non-zero on any warning.
# Locks are common/mutex.h's Mutex/MutexLock/CondVar (std::mutex underneath, so that TSan
# still sees them); clang refuses an annotation that names a plain std::mutex, and this
# script refuses any std::mutex, lock_guard, unique_lock or condition_variable outside
# common/mutex.h, since the analysis cannot see those locks at all.
#
# Which sources: every .cc of the project's folders that includes common/mutex.h or uses
# the annotations, directly or through a project header (found with grep, to a fixed
# point). A file with neither takes no lock the analysis could check, so compiling it
# would only cost time. Today that is the coordinator (with trainctl's tests), common/,
# the worker's agent, trainer, rank lifecycle, engines, communicators and gradient
# buckets (worker/parallel, worker/engine, worker/engine/cuda: host code only, CUDA's
# headers from /usr/local/cuda/include), and the tests that drive them.
#
# First it proves it can fail: tools/checks/testdata/thread_safety_violation.cc reads a
# guarded member without its lock and must be refused. By hand:
#   clang++ -std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. \
#     tools/checks/testdata/thread_safety_violation.cc
#   ... error: reading variable 'count_' requires holding mutex 'mutex_' [-Werror,-Wthread-safety-analysis]
#
# Generated protobuf headers come from Bazel (bazel-bin/), built here first.
#   tools/checks/thread_safety.sh            # every source that takes locks
#   tools/checks/thread_safety.sh FILE.cc    # just these files
#   tools/checks/thread_safety.sh --list     # which sources, without compiling
set -euo pipefail
cd "$(dirname "$0")/../.."

CXX="${CXX:-clang++}"
BAZEL="${BAZEL:-bazel}"
CUDA_INCLUDE="${CUDA_INCLUDE:-/usr/local/cuda/include}"
# The cuDNN frontend's headers (kernels/cuda/cudnn_attention.cc), where make deps puts them.
CUDNN_FRONTEND_INCLUDE="${CUDNN_FRONTEND_INCLUDE:-/opt/mtrain/cudnn_frontend/include}"
PROBE=tools/checks/testdata/thread_safety_violation.cc
# The project's own code (bazel-* output trees and third-party folders excluded).
ROOTS=(checkpoint common coordinator kernels plan spec tests worker)

# Prints the project's .cc files that include common/mutex.h or write a lock annotation,
# directly or through any chain of project headers.
locking_sources() {
  local patterns
  patterns=$(mktemp)
  # Seeds: the lock header and the annotations themselves (an annotation on a lock that
  # is not common/mutex.h's is a finding too, so such a file must be compiled).
  local seeds='#include "common/mutex.h"
#include "absl/base/thread_annotations.h"
_GUARDED_BY(
_LOCKS_REQUIRED('
  local -a headers=()
  local count=-1
  while [[ ${#headers[@]} -ne $count ]]; do
    count=${#headers[@]}
    { echo "$seeds"; printf '#include "%s"\n' "${headers[@]}"; } >"$patterns"
    mapfile -t headers < <(grep -rlF -f "$patterns" --include='*.h' "${ROOTS[@]}" | sort)
  done
  { echo "$seeds"; printf '#include "%s"\n' "${headers[@]}"; } >"$patterns"
  grep -rlF -f "$patterns" --include='*.cc' "${ROOTS[@]}" | sort
  rm -f "$patterns"
}

if [[ "${1:-}" == "--list" ]]; then
  locking_sources
  exit 0
fi

if ! command -v "$CXX" >/dev/null; then
  echo "thread_safety.sh: $CXX not found (Debian: apt-get install clang)" >&2
  exit 2
fi

PKGS="grpc++ protobuf sqlite3 prometheus-cpp-pull prometheus-cpp-core absl_status absl_statusor
  absl_strings absl_str_format absl_flags absl_synchronization absl_time"
# CUDA's headers after the system's (-idirafter), and as system headers, so that their
# own warnings are not ours. Gloo's are Debian's, in /usr/include.
# shellcheck disable=SC2086
FLAGS="-std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. -Ibazel-bin
  -idirafter $CUDA_INCLUDE -isystem $CUDNN_FRONTEND_INCLUDE $(pkg-config --cflags $PKGS)"
export CXX FLAGS

# 1. The check must catch a violation, or a pass below means nothing.
# shellcheck disable=SC2086
if out=$("$CXX" $FLAGS "$PROBE" 2>&1); then
  echo "thread_safety.sh: the deliberate violation compiled cleanly: the analysis is off" >&2
  exit 1
fi
if ! grep -q 'Wthread-safety' <<<"$out"; then
  echo "thread_safety.sh: the deliberate violation failed for another reason:" >&2
  echo "$out" >&2
  exit 1
fi

# 2. A lock the analysis cannot see defeats it: outside common/mutex.h the project takes
# no std::mutex, std::lock_guard, std::unique_lock or std::condition_variable of its own.
raw_locks=$(grep -rnE \
  'std::(mutex|timed_mutex|recursive_mutex|shared_mutex|lock_guard|unique_lock|scoped_lock|condition_variable)\b' \
  --include='*.h' --include='*.cc' --include='*.cu' "${ROOTS[@]}" |
  grep -v '^common/mutex\.h:' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
if [[ -n "$raw_locks" ]]; then
  echo "thread_safety.sh: use common/mutex.h (Mutex, MutexLock, CondVar) instead of:" >&2
  echo "$raw_locks" >&2
  exit 1
fi

# 3. Generated headers the sources include.
"$BAZEL" build --noshow_progress //proto:all //dashboard/status:status_page_assets \
  >/dev/null 2>&1 || {
  echo "thread_safety.sh: bazel build of the generated headers failed" >&2
  exit 2
}

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(locking_sources)
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
