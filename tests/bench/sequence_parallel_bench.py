#!/usr/bin/env python3
"""Activation memory and step time of sequence parallelism with each recomputation
granularity (issue 21) on the CPU engine: two tensor ranks (`launch`, one thread each),
a 4-layer GPT (hidden 256, 8 heads, seq 256, micro batch 4, dropout 0.1), 6 steps; the
activation peak of a rank (activation_memory_peak_bytes) and the median step time of
steps 3-6. A benchmark, not a test: it prints a table.

    bazel build //worker:launch //worker:train
    python3 tests/bench/sequence_parallel_bench.py
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNS = [  # (name, parallel.* extra, train.* extra)
    ("t=2", {}, {}),
    ("t=2 + SP", {"sequence_parallel": True}, {}),
    ("t=2 selective", {}, {"recompute_granularity": "selective"}),
    ("t=2 + SP selective", {"sequence_parallel": True}, {"recompute_granularity": "selective"}),
    ("t=2 + SP full", {"sequence_parallel": True}, {"recompute_granularity": "full"}),
]


def run(name, parallel, train, work):
    spec = {
        "name": "sp",
        "model": {"num_layers": 4, "num_heads": 8, "hidden_size": 256, "seq_length": 256},
        "parallel": dict({"tensor": 2, "micro_batch_size": 4, "global_batch_size": 4}, **parallel),
        "train": dict({"steps": 6, "dropout": 0.1, "seed": 3}, **train),
        "data": {"path": os.path.join(ROOT, "tests/data/shakespeare.txt")},
        "device": "DEVICE_CPU",
    }
    tag = name.replace(" ", "_").replace("=", "").replace("+", "")
    spec_path = os.path.join(work, f"{tag}.json")
    with open(spec_path, "w") as out:
        json.dump(spec, out)
    out_dir = os.path.join(work, tag)
    subprocess.run([os.path.join(ROOT, "bazel-bin/worker/launch"), f"--spec={spec_path}",
                    f"--out_dir={out_dir}", "--threads_per_rank=1"], check=True,
                   capture_output=True)
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    rows = [r for r in rows if r["rank"] == 0]
    return (rows[-1]["activation_memory_peak_bytes"],
            statistics.median(r["step_seconds"] for r in rows[2:]), rows[-1]["loss"],
            rows[-1]["tensor_bytes_sent"])


def main():
    with tempfile.TemporaryDirectory() as work:
        results = [(name, *run(name, p, t, work)) for name, p, t in RUNS]
    base = results[0][1]
    print(f"{'run':<22} {'activations':>12} {'vs t=2':>7} {'step s':>7} {'tensor MB':>10}  loss")
    for name, peak, seconds, loss, tensor in results:
        print(f"{name:<22} {peak / 2**20:9.2f} MiB {peak / base:7.3f} {seconds:7.3f} "
              f"{tensor / 1e6:10.2f}  {loss:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
