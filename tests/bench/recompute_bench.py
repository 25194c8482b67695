#!/usr/bin/env python3
"""Activation memory and step time of each recomputation granularity (issue 21) on the CPU
engine: one `train` rank, a 4-layer GPT (hidden 256, 8 heads, seq 256, micro batch 4,
dropout 0.1), 8 steps; the activation peak from the metrics line
(activation_memory_peak_bytes: what the microbatch in flight keeps for its backward) and
the median step time of steps 3-8. A benchmark, not a test: it prints a table.

    bazel build //worker:train
    python3 tests/bench/recompute_bench.py [--steps 8]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODES = [  # (name, train.* fields)
    ("none", {}),
    ("selective", {"recompute_granularity": "selective"}),
    ("full block 2", {"recompute_granularity": "full", "recompute_method": "block",
                      "recompute_num_layers": 2}),
    ("full uniform 1", {"recompute_granularity": "full"}),
    ("full uniform 2", {"recompute_granularity": "full", "recompute_num_layers": 2}),
]


def run(name, fields, steps, work):
    spec = {
        "name": "recompute",
        "model": {"num_layers": 4, "num_heads": 8, "hidden_size": 256, "seq_length": 256},
        "parallel": {"micro_batch_size": 4, "global_batch_size": 4},
        "train": dict({"steps": steps, "dropout": 0.1, "seed": 3}, **fields),
        "data": {"path": os.path.join(ROOT, "tests/data/shakespeare.txt")},
        "device": "DEVICE_CPU",
    }
    tag = name.replace(" ", "_")
    spec_path = os.path.join(work, f"{tag}.json")
    metrics = os.path.join(work, f"{tag}.jsonl")
    with open(spec_path, "w") as out:
        json.dump(spec, out)
    subprocess.run([os.path.join(ROOT, "bazel-bin/worker/train"), f"--spec={spec_path}",
                    f"--metrics_jsonl={metrics}"], check=True, capture_output=True)
    rows = [json.loads(line) for line in open(metrics)]
    return (rows[-1]["activation_memory_peak_bytes"],
            statistics.median(r["step_seconds"] for r in rows[2:]), rows[-1]["loss"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        results = [(name, *run(name, fields, args.steps, work)) for name, fields in MODES]
    base_bytes, base_seconds = results[0][1], results[0][2]
    print(f"{'mode':<16} {'activations':>12} {'vs none':>8} {'step s':>8} {'vs none':>8}  loss")
    for name, peak, seconds, loss in results:
        print(f"{name:<16} {peak / 2**20:9.2f} MiB {peak / base_bytes:8.3f} {seconds:8.3f} "
              f"{seconds / base_seconds:8.3f}  {loss:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
