#!/usr/bin/env python3
"""Where a training step's GPU time goes: Nsight Compute (ncu) times every kernel of the
engine's first training steps on one config of tests/bench/gpu_vs_pytorch.py, and this
prints the kernels grouped by name, largest total first, with their share of the sum.

On the GPU machine (ncu is there; the bundle's libraries via bundle_env.sh):
  source tests/gpu/bundle_env.sh /tmp/gpu_bundle
  python3 tests/gpu/profile_kernels.py --train /tmp/gpu_bundle/bin/train --config gpt2-124m \
      --csv $OUT/kernels.csv

ncu replays each kernel to time it alone, so the sum is kernel time without overlap or
launch gaps: compare it with the step time the benchmark measures to see the idle share.
"""
import argparse
import collections
import csv
import io
import json
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
import gpu_vs_pytorch  # noqa: E402  the benchmark's configs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--config", default="gpt2-124m")
    parser.add_argument("--steps", type=int, default=1, help="training steps to run")
    parser.add_argument("--launch_count", type=int, default=3000, help="kernels to time at most")
    parser.add_argument("--csv", default="", help="also keep ncu's raw CSV here")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    cfg = gpu_vs_pytorch.CONFIGS[args.config]
    spec = {
        "name": "profile",
        "model": {"num_layers": cfg["layers"], "num_heads": cfg["heads"],
                  "hidden_size": cfg["hidden"], "seq_length": cfg["seq"],
                  "vocab_size": cfg["vocab"]},
        "parallel": {"micro_batch_size": cfg["batch"], "global_batch_size": cfg["batch"]},
        "train": {"steps": args.steps, "dropout": 0.0, "seed": 1},
        "precision": "PRECISION_BF16",
        "device": "DEVICE_CUDA",
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = pathlib.Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec))
        run = subprocess.run(
            # One metric needs one pass: application replay runs the program once, without
            # saving and restoring memory around each kernel; clocks as they run.
            ["ncu", "--csv", "--print-units", "base", "--metrics", "gpu__time_duration.sum",
             "--replay-mode", "application", "--clock-control", "none",
             "--launch-count", str(args.launch_count), args.train, f"--spec={spec_path}"],
            capture_output=True, text=True)
    if args.csv:
        pathlib.Path(args.csv).write_text(run.stdout)
    # ncu prints its own and the program's lines; the CSV rows start with a quote.
    rows = [line for line in run.stdout.splitlines() if line.startswith('"')]
    if not rows:
        print(f"ncu produced no measurements (exit {run.returncode}):\n{run.stderr[-3000:]}"
              f"{run.stdout[-3000:]}")
        return 1
    totals = collections.defaultdict(float)
    counts = collections.Counter()
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:70]
        totals[name] += float(row["Metric Value"].replace(",", "")) * 1e-6  # ns -> ms
        counts[name] += 1
    whole = sum(totals.values())
    print(f"{args.config}, {args.steps} steps: {sum(counts.values())} kernels, {whole:.1f} ms "
          f"of kernel time ({whole / args.steps:.1f} ms a step)")
    print(f"{'kernel':<70} {'calls':>6} {'ms':>9} {'share':>6}")
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{name:<70} {counts[name]:>6} {ms:9.2f} {100 * ms / whole:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
