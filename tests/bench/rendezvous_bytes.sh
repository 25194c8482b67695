#!/usr/bin/env bash
# Prints what one generation's rendezvous puts in the coordinator's key-value store, for a
# few world sizes, next to the per-generation limit the coordinator allows
# (RendezvousGenerationByteLimit in coordinator/rendezvous_store.h). Runs a static world of
# `train` processes for one step through `launch` (CPU, tiny model): its DirectoryStore
# holds the same keys and values ranks set through KeyValueSet, one file per key.
#
#   bazel build //worker:launch //worker:train && tests/bench/rendezvous_bytes.sh [OUT_DIR]
set -euo pipefail
out=${1:-$(mktemp -d)}
bin=bazel-bin/worker
# The coordinator prefixes each key with JOB/gen-N/ ("job-1/gen-1/": 12 bytes).
readonly prefix_bytes=12
printf '%-22s %6s %6s %12s %14s\n' "layout (t,p,d)" world keys bytes limit
for layout in "1 1 2" "2 2 1" "2 2 2" "2 2 4" "1 1 16"; do
  read -r t p d <<<"$layout"
  world=$((t * p * d))
  dir="$out/t$t-p$p-d$d"
  rm -rf "$dir"
  mkdir -p "$dir"
  cat >"$dir/spec.json" <<JSON
{"name": "rdv", "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 32, "seq_length": 16},
 "parallel": {"tensor": $t, "pipeline": $p, "data": $d, "micro_batch_size": 1,
              "global_batch_size": $((2 * d))},
 "train": {"steps": 1}, "device": "DEVICE_CPU"}
JSON
  "$bin/launch" --spec="$dir/spec.json" --out_dir="$dir/run" --threads_per_rank=1 \
    --train_binary="$bin/train" >"$dir/launch.log" 2>&1 || {
    echo "launch failed for $layout: see $dir/launch.log" >&2
    exit 1
  }
  python3 - "$dir/run/rendezvous" "$prefix_bytes" "$world" "$t,$p,$d" <<'PY'
import os, sys, urllib.parse
directory, prefix, world, layout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
keys = total = 0
for name in os.listdir(directory):
    if name.startswith(".tmp-"):
        continue
    key = urllib.parse.unquote(name)
    total += prefix + len(key.encode()) + os.path.getsize(os.path.join(directory, name))
    keys += 1
limit = world * 64 * 1024 + 6 * world * world * 256
print(f"({layout}){'':<15} {world:6d} {keys:6d} {total:12d} {limit:14d}")
PY
done
