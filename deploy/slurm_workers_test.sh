#!/usr/bin/env bash
# Runs deploy/slurm/mtrain_workers.sbatch as Slurm would run the batch script, with a
# stand-in `srun` that starts the task command once per task (2 tasks, SLURM_LOCALID 0
# and 1) and a stand-in `worker` that records its flags: each task starts one worker on
# its own GPU with a worker id unique on the node, and the script refuses to start
# without a coordinator address.
set -euo pipefail

readonly script="$PWD/deploy/slurm/mtrain_workers.sbatch"
readonly dir="$TEST_TMPDIR/slurm"
mkdir -p "$dir/path" "$dir/bin" "$dir/out"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# srun [--options...] COMMAND...: one process per task, each with its local id.
cat > "$dir/path/srun" <<'SRUN'
#!/usr/bin/env bash
while [[ "$1" == --* ]]; do shift; done
for task in 0 1; do
  SLURM_LOCALID=$task SLURM_PROCID=$task "$@" &
done
wait
SRUN
cat > "$dir/bin/worker" <<'WORKER'
#!/usr/bin/env bash
printf '%s\n' "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" "$@" > "$FAKE_OUT/worker-$SLURM_LOCALID"
WORKER
chmod +x "$dir/path/srun" "$dir/bin/worker"
echo "secret" > "$dir/token"

run() {
  env PATH="$dir/path:$PATH" FAKE_OUT="$dir/out" SLURM_JOB_ID=42 SLURM_NTASKS=2 \
    SLURM_JOB_NODELIST=node1 SLURM_CPUS_PER_TASK=4 MTRAIN_BIN="$dir/bin" \
    MTRAIN_TOKEN_FILE="$dir/token" "$@" bash "$script"
}

# Every task sees both GPUs (no per-task binding) and the step owns physical GPUs 4 and 5.
run MTRAIN_COORDINATOR=10.0.0.1:7070 CUDA_VISIBLE_DEVICES=0,1 SLURM_STEP_GPUS=4,5 \
  > "$dir/run.log" 2>&1 || fail "batch script failed: $(cat "$dir/run.log")"
host=$(hostname -s)
for task in 0 1; do
  out="$dir/out/worker-$task"
  [[ -f "$out" ]] || fail "task $task started no worker"
  gpu=$((task + 4))
  for expected in "CUDA_VISIBLE_DEVICES=$task" "--coordinator=10.0.0.1:7070" "--device=cuda" \
                  "--worker_id=$host-gpu$gpu" "--threads=4" "--token_file=$dir/token" \
                  "--log_dir=/tmp/mtrain-42"; do
    grep -qxF -- "$expected" "$out" || fail "task $task: no '$expected' in: $(tr '\n' ' ' < "$out")"
  done
done

# Bound GPUs (one visible per task) and no GPU ids from Slurm: local ids name the workers.
rm -f "$dir/out"/*
run MTRAIN_COORDINATOR=c:7070 CUDA_VISIBLE_DEVICES=0 MTRAIN_DEVICE=auto > "$dir/run.log" 2>&1 ||
  fail "batch script failed: $(cat "$dir/run.log")"
grep -qxF -- "--worker_id=$host-gpu1" "$dir/out/worker-1" || fail "$(cat "$dir/out/worker-1")"
grep -qxF -- "CUDA_VISIBLE_DEVICES=0" "$dir/out/worker-1" || fail "$(cat "$dir/out/worker-1")"
grep -qxF -- "--device=auto" "$dir/out/worker-0" || fail "$(cat "$dir/out/worker-0")"

# No coordinator address: refused before any worker starts.
rm -f "$dir/out"/*
if run > "$dir/run.log" 2>&1; then fail "started without MTRAIN_COORDINATOR"; fi
grep -q "MTRAIN_COORDINATOR" "$dir/run.log" || fail "no reason given: $(cat "$dir/run.log")"
[[ -z "$(ls -A "$dir/out")" ]] || fail "workers started without a coordinator address"
echo "PASS"
