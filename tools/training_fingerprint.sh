#!/usr/bin/env bash
# Bit-identity fingerprint of training: runs three layouts with `launch` and records every
# rank's per-step losses (as printed) and the SHA-256 of the final gathered weights.
# Two builds train identically when their fingerprints are equal:
#
#   tools/training_fingerprint.sh BIN_DIR OUT_DIR     # BIN_DIR holds `launch` and `train`
#   diff -r OUT_A/fingerprint.txt OUT_B/fingerprint.txt
#
# Used to check that a refactoring left training bit-for-bit unchanged (issue 16).
set -euo pipefail
bin_dir=$(cd "$1" && pwd)
out_dir=$2
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
: > "$out_dir/fingerprint.txt"

run_layout() {  # name tensor pipeline data virtual schedule zero
  local name=$1 dir="$out_dir/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/spec.json" <<SPEC
{"name": "fingerprint-$name",
 "model": {"num_layers": 8, "num_heads": 4, "hidden_size": 32, "seq_length": 16},
 "parallel": {"tensor": $2, "pipeline": $3, "data": $4, "virtual_stages": $5,
              "schedule": "$6", "zero_stage": $7, "micro_batch_size": 2, "global_batch_size": 8},
 "optimizer": {"lr": 3e-3, "warmup_steps": 3},
 "train": {"steps": 12, "seed": 11, "dropout": 0.1},
 "device": "DEVICE_CPU"}
SPEC
  "$bin_dir/launch" --spec="$dir/spec.json" --out_dir="$dir/run" --threads_per_rank=1 \
    -- --save_weights="$dir/weights.safetensors" > "$dir/launch.log" 2>&1 ||
    { echo "layout $name failed; see $dir/launch.log" >&2; exit 1; }
  {
    echo "== $name"
    # "rank R step S loss L", ordered by rank then step.
    sed -n 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*"rank":\([0-9]*\).*/rank \3 step \1 loss \2/p' \
      "$dir/run/metrics.jsonl" | sort -k2,2n -k4,4n
    echo "weights $(sha256sum < "$dir/weights.safetensors" | cut -d' ' -f1)"
  } >> "$out_dir/fingerprint.txt"
}

run_layout t1p1d1 1 1 1 1 SCHEDULE_1F1B 0
run_layout t2p2d1 2 2 1 1 SCHEDULE_1F1B 0
run_layout t1p2d2_interleaved 1 2 2 2 SCHEDULE_INTERLEAVED_1F1B 1
cat "$out_dir/fingerprint.txt" | grep -c loss | xargs echo "losses recorded:"
