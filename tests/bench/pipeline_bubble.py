#!/usr/bin/env python3
"""Measures the pipeline bubble: per stage, the time spent waiting for neighbours against
the time spent computing, next to the analytic bubble: Megatron's (p-1)/m ((p-1)/(v m)
interleaved), the zero-bubble paper's (p-1)/(3m) for ZB-H1 (equal forward, input-gradient
and weight-gradient costs) and the checker's for this project's ZB-V (its list schedule,
plan/zero_bubble_schedule.h: (p-1)/(6m) at p = 4); and each stage's peak activation memory
as the engine measures it. A benchmark, not a test: it prints a table (and --markdown a
table for docs/PERFORMANCE.md).

    bazel build //worker:launch //worker:train
    python3 tests/bench/pipeline_bubble.py [--steps 8] [--markdown] [--only zb_h1,zb_v]
                                           [--p4]

Each configuration runs as real `train` processes (one per stage, one thread each) started
by `launch`; every rank appends its per-step timings (--stage_timings). The bubble of a
stage is median(wait) / median(compute) over the steps after the first two (warm-up).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = [  # (pipeline, microbatches, virtual stages, schedule)
    (2, 2, 1, "SCHEDULE_1F1B"),
    (2, 4, 1, "SCHEDULE_1F1B"),
    (2, 8, 1, "SCHEDULE_1F1B"),
    (2, 8, 1, "SCHEDULE_GPIPE"),
    (2, 4, 2, "SCHEDULE_INTERLEAVED_1F1B"),
    (2, 8, 2, "SCHEDULE_INTERLEAVED_1F1B"),
    (4, 4, 1, "SCHEDULE_1F1B"),
    (4, 8, 1, "SCHEDULE_1F1B"),
    (2, 4, 1, "SCHEDULE_ZB_H1"),
    (2, 8, 1, "SCHEDULE_ZB_H1"),
    (4, 8, 1, "SCHEDULE_ZB_H1"),
    (2, 4, 2, "SCHEDULE_ZB_V"),
    (2, 8, 2, "SCHEDULE_ZB_V"),
]

# The comparison (--p4): every schedule at p = 4, m = 8 and 16.
P4_CONFIGS = [(4, m, v, schedule)
              for m in (8, 16)
              for v, schedule in ((1, "SCHEDULE_GPIPE"), (1, "SCHEDULE_1F1B"),
                                  (2, "SCHEDULE_INTERLEAVED_1F1B"), (1, "SCHEDULE_ZB_H1"),
                                  (2, "SCHEDULE_ZB_V"))]


def ideal_bubble(p, m, v, schedule):
    if schedule == "SCHEDULE_ZB_H1":
        return (p - 1) / (3 * m)
    if schedule == "SCHEDULE_ZB_V":
        # The list schedule's lower bound (p - 1 idle units against 6m busy, F = B = W);
        # the checker measures up to 1.8 times that at other p (zero_bubble_schedule_test).
        return (p - 1) / (6 * m)
    return (p - 1) / (v * m)


def run(p, m, v, schedule, steps, bin_dir, work, vocab):
    name = f"p{p}_m{m}_v{v}_{schedule.split('_', 1)[1].lower()}"
    model = {"num_layers": 8, "num_heads": 8, "hidden_size": 256, "seq_length": 256}
    if vocab:
        model["vocab_size"] = vocab
    spec = {
        "name": name,
        "model": model,
        "parallel": {"pipeline": p, "virtual_stages": v, "schedule": schedule,
                     "micro_batch_size": 2, "global_batch_size": 2 * m},
        "train": {"steps": steps, "dropout": 0.0},
        "device": "DEVICE_CPU",
    }
    spec_path = os.path.join(work, name + ".json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    out = os.path.join(work, name)
    timings = os.path.join(work, name + ".timings.jsonl")
    subprocess.run([os.path.join(bin_dir, "worker/launch"), f"--spec={spec_path}",
                    f"--out_dir={out}", "--threads_per_rank=1", "--",
                    f"--stage_timings={timings}"],
                   check=True, stdout=subprocess.DEVNULL)
    per_stage = {}
    with open(timings) as f:
        for line in f:
            row = json.loads(line)
            if row["step"] <= 2:
                continue
            per_stage.setdefault(row["pp_stage"], []).append(row)
    bubbles, peaks = [], []
    for stage in sorted(per_stage):
        rows = per_stage[stage]
        wait = statistics.median(r["wait_seconds"] for r in rows)
        compute = statistics.median(r["compute_seconds"] for r in rows)
        bubbles.append(wait / compute)
        peaks.append(max(r.get("activation_peak_bytes", 0) for r in rows) / 2**20)
    step_ms = 1000 * statistics.median(r["step_seconds"] for r in per_stage[0])
    compute_ms = 1000 * statistics.median(r["compute_seconds"] for r in per_stage[0])
    ideal = ideal_bubble(p, m, v, schedule)
    return name, p, m, v, ideal, bubbles, step_ms, peaks, compute_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--bin-dir", default=None,
                        help="where the binaries are (default: `bazel info bazel-bin`)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", default="",
                        help="comma-separated schedules to run (1f1b, gpipe, interleaved_1f1b, "
                             "zb_h1, zb_v); default all")
    parser.add_argument("--vocab", type=int, default=0,
                        help="model.vocab_size (default: the spec's, GPT-2's 50257, whose "
                             "output layer outweighs several layers)")
    parser.add_argument("--p4", action="store_true",
                        help="every schedule at p = 4, m = 8 and 16 instead of the default set")
    args = parser.parse_args()
    if args.bin_dir is None:
        # Not the bazel-bin symlink: it follows whichever configuration built last.
        args.bin_dir = subprocess.run(["bazel", "info", "bazel-bin"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as work:
        only = {name.strip().lower() for name in args.only.split(",") if name.strip()}
        for p, m, v, schedule in (P4_CONFIGS if args.p4 else CONFIGS):
            if only and schedule.split("_", 1)[1].lower() not in only:
                continue
            print(f"running p={p} m={m} v={v} {schedule} ...", file=sys.stderr, flush=True)
            results.append(run(p, m, v, schedule, args.steps, args.bin_dir, work, args.vocab))
    if args.markdown:
        print("| schedule | p | m | v | ideal bubble | measured wait/compute per stage | step ms "
              "| stage 0 compute ms | peak activations per stage (MiB) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, p, m, v, ideal, bubbles, step_ms, peaks, compute_ms in results:
            stages = " / ".join(f"{b:.2f}" for b in bubbles)
            memory = " / ".join(f"{x:.1f}" for x in peaks)
            print(f"| {name.split('_', 3)[3]} | {p} | {m} | {v} | {ideal:.3f} | {stages} | "
                  f"{step_ms:.0f} | {compute_ms:.0f} | {memory} |")
    else:
        print(f"{'config':32} {'ideal':>7}  measured per stage (wait/compute)  step ms  "
              "peak activations MiB per stage")
        for name, p, m, v, ideal, bubbles, step_ms, peaks, _ in results:
            print(f"{name:32} {ideal:7.3f}  " + "  ".join(f"{b:.3f}" for b in bubbles) +
                  f"  {step_ms:.0f}  " + " / ".join(f"{x:.1f}" for x in peaks))


if __name__ == "__main__":
    main()
