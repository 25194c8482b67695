#!/usr/bin/env bash
# Runs a benchmark client (a //tests/bench binary) against a fresh coordinator on this
# machine: builds both, starts the coordinator on free ports with a temporary state
# directory, runs the benchmark with the given arguments (plus --coordinator and
# --coordinator_pid), then stops the coordinator and deletes its state.
#
#   tests/bench/against_coordinator.sh coordinator_load --workers=256 --seconds=20
#
# The coordinator's own output is kept in a temporary log and printed only on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:?usage: against_coordinator.sh BENCHMARK [ARGS...]}
shift

bazel build //coordinator "//tests/bench:$bench"
bin=$(bazel info bazel-bin 2>/dev/null)

state=$(mktemp -d "${TMPDIR:-/tmp}/$bench.XXXXXX")
coordinator_pid=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  if [[ -n "$coordinator_pid" ]] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -TERM "$coordinator_pid" 2>/dev/null || true
    # The coordinator gives in-flight calls 2 s to end; after 10 s it is killed.
    for _ in $(seq 100); do
      kill -0 "$coordinator_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$coordinator_pid" 2>/dev/null || true
    wait "$coordinator_pid" 2>/dev/null || true
  fi
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Created here, not by the child's redirection, which may not have run yet when the loop
# below first reads the log.
: >"$state/coordinator.log"
# COORDINATOR_BIN runs another build of the coordinator (an A/B of two commits).
"${COORDINATOR_BIN:-$bin/coordinator/coordinator}" --listen=127.0.0.1:0 --http=127.0.0.1:0 \
  --state_dir="$state/state" >"$state/coordinator.log" 2>&1 &
coordinator_pid=$!

# The coordinator prints "coordinator listening on HOST:PORT" once it serves.
address=""
for _ in $(seq 100); do
  address=$(sed -n 's/^coordinator listening on \(.*\)$/\1/p' "$state/coordinator.log" || true)
  [[ -n "$address" ]] && break
  if ! kill -0 "$coordinator_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [[ -z "$address" ]]; then
  echo "$bench: the coordinator did not start:" >&2
  cat "$state/coordinator.log" >&2
  exit 1
fi

# And "coordinator metrics on http://HOST:PORT/metrics": benchmarks that take
# --coordinator_http read the coordinator's counters there.
# (printed just after the gRPC line).
http_args=()
http=""
for _ in $(seq 20); do
  http=$(sed -n 's|^coordinator metrics on http://\([^/]*\)/metrics$|\1|p' "$state/coordinator.log" || true)
  [[ -n "$http" ]] && break
  sleep 0.1
done
# (--helpfull exits 1, which pipefail would take for the pipeline's status.)
if [[ -n "$http" ]] && { "$bin/tests/bench/$bench" --helpfull 2>/dev/null || true; } |
  grep -q -- '-coordinator_http'; then
  http_args=(--coordinator_http="$http")
fi

rc=0
"$bin/tests/bench/$bench" --coordinator="$address" \
  --coordinator_pid="$coordinator_pid" "${http_args[@]}" "$@" || rc=$?
if ((rc != 0)); then
  echo "$bench: benchmark failed ($rc); coordinator log:" >&2
  tail -n 20 "$state/coordinator.log" >&2
fi
exit "$rc"
