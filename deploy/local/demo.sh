#!/usr/bin/env bash
# The local demo: a coordinator and 4 CPU workers on loopback; trainctl submits the demo
# job (deploy/local/demo_job.json: the shipped corpus, tensor 2 x pipeline 2, 1F1B, a
# validation loss every 50 steps) and follows it to the end, then a summary is printed.
# Everything started here is stopped on exit, Ctrl-C included.
#
#   deploy/local/demo.sh                       # run the demo job, summarise, stop
#   DEMO_JOB=my_job.json deploy/local/demo.sh  # another spec
#   DEMO_HOLD=1 deploy/local/demo.sh           # keep everything running until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-$(bazel info bazel-bin 2>/dev/null || echo bazel-bin)}
JOB_SPEC=${DEMO_JOB:-deploy/local/demo_job.json}
NUM_WORKERS=${NUM_WORKERS:-4}
STATE=$(mktemp -d -t mtrain-demo.XXXXXX)
PIDS=()

cleanup() {
  trap - EXIT INT TERM
  if ((${#PIDS[@]} > 0)); then
    kill -TERM "${PIDS[@]}" 2>/dev/null || true
    # Give each process a few seconds to stop cleanly, then make sure.
    for _ in $(seq 50); do
      alive=0
      for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
  fi
  echo "demo: stopped everything; logs were in $STATE"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted"; exit 130' INT TERM

for binary in coordinator/coordinator worker/worker coordinator/cli/trainctl; do
  [[ -x "$BIN/$binary" ]] || { echo "demo: $BIN/$binary missing: run 'make demo'" >&2; exit 1; }
done

# Created before the coordinator starts: the loop below may read it first.
: >"$STATE/coordinator.log"
"$BIN/coordinator/coordinator" --listen=127.0.0.1:0 --http=127.0.0.1:0 \
  --state_dir="$STATE/coordinator" >"$STATE/coordinator.log" 2>&1 &
PIDS+=($!)
address=""
for _ in $(seq 200); do
  address=$(sed -n 's/^coordinator listening on //p' "$STATE/coordinator.log")
  [[ -n "$address" ]] && break
  sleep 0.1
done
[[ -n "$address" ]] || { echo "demo: coordinator did not start:" >&2; cat "$STATE/coordinator.log" >&2; exit 1; }
echo "demo: coordinator listening on $address"
metrics_url=$(sed -n 's/^coordinator metrics on //p' "$STATE/coordinator.log")
echo "demo: Prometheus metrics at $metrics_url"
status_url=$(sed -n 's/^coordinator status page on //p' "$STATE/coordinator.log")
if [[ -n "$status_url" ]]; then
  echo "demo: status page (jobs, live loss chart, workers) at $status_url"
fi

for i in $(seq 0 $((NUM_WORKERS - 1))); do
  # One thread per rank: the demo's 4 ranks share this machine's cores.
  "$BIN/worker/worker" --coordinator="$address" --device=cpu --worker_id="demo-worker-$i" \
    --threads=1 --log_dir="$STATE/ranks" >"$STATE/worker-$i.log" 2>&1 &
  PIDS+=($!)
done

trainctl() { "$BIN/coordinator/cli/trainctl" --coordinator="$address" "$@"; }
for _ in $(seq 100); do
  alive=$(trainctl workers --json 2>/dev/null | grep -c '"alive":true' || true)
  ((alive == NUM_WORKERS)) && break
  sleep 0.2
done
echo "demo: $alive of $NUM_WORKERS workers registered and heartbeating:"
trainctl workers
((alive == NUM_WORKERS)) || { echo "demo: workers failed to register; see $STATE" >&2; exit 1; }


echo
echo "demo: submitting $JOB_SPEC"
# In the background and waited for, so that a signal to this script runs its trap at once
# (bash defers traps while a foreground command runs).
trainctl submit --wait "$JOB_SPEC" &
PIDS+=($!)
if ! wait $!; then
  echo "demo: the job did not succeed; logs: $STATE (ranks/ holds each rank's log)" >&2
  trainctl list >&2 || true
  exit 1
fi
job=$(trainctl list --json | sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' | tail -n 1)
echo
echo "demo: summary of $job"
trainctl status "$job"
echo
echo "demo: checkpoints of $job in the coordinator's store (a restart resumes from the newest):"
trainctl checkpoints "$job"
echo "demo: evaluations and samples of $job at its checkpoints (train.eval_tasks,"
echo "      train.generate; trainctl evals):"
trainctl evals "$job"
echo
echo "demo: the last checkpoint continues a prompt on the workers (trainctl generate):"
trainctl generate "$job" --prompt="JULIET:" --max_new_tokens=64 --temperature=0.8 --top_k=40
echo
echo "demo: export one for HuggingFace transformers with:  trainctl export $job OUT_DIR"
echo "demo: metrics were served at $metrics_url; job database and rank logs in $STATE"
echo "demo: try it yourself:  $BIN/coordinator/cli/trainctl --coordinator=$address list"
if [[ -n "${DEMO_HOLD:-}" ]]; then
  echo "demo: running until Ctrl-C"
  while true; do sleep 1; done
fi
