#!/usr/bin/env python3
"""The planner's cost model against measured CPU training on this machine (issue 18).

For each layout of two model sizes, runs every rank with `launch` (real processes, Gloo on
loopback, the ranks sharing this host's cores), takes the median step time after warm-up
and the loss-computing rank's heap peak, and sets beside them the cost model's prediction
for the same spec (`plan:predict_step` on a cluster description, each rank getting
1/world of the host). Prints one row per layout, the median and worst absolute error, and
whether the layout the model ranks first is the one measured fastest (when it is not, the
two are measured again alternately, `--confirm` times each, and compared on the median of
all their runs: this VM's speed drifts by 10% between minutes). Memory: the cost model's
estimate for the last pipeline stage (whose ranks write the metrics) against the engine's
own allocations that those ranks report (`host_memory_peak_bytes`).

  bazel build //worker:launch //worker:train //plan:predict_step
  python3 tests/bench/planner_vs_launch.py [--cluster deploy/clusters/cpu_host.json]
      [--steps 10] [--warmup 2] [--models small,large,llama_small,llama_large] [--confirm 3]
      [--only 't1 p1 d1 v1 b1,t1 p1 d1 v1 b4']
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin"

MODELS = {
    "small": dict(num_layers=4, num_heads=4, hidden_size=256, seq_length=256, vocab_size=256),
    "large": dict(num_layers=8, num_heads=8, hidden_size=512, seq_length=256, vocab_size=256),
    # Llama-style decoders of the same sizes (issue 33): grouped-query heads, SwiGLU of the
    # family's default width, rotary positions, untied output.
    "llama_small": dict(family="MODEL_FAMILY_LLAMA", num_layers=4, num_heads=4, num_kv_heads=2,
                        hidden_size=256, ffn_hidden_size=768, seq_length=256, vocab_size=256),
    "llama_large": dict(family="MODEL_FAMILY_LLAMA", num_layers=8, num_heads=8, num_kv_heads=4,
                        hidden_size=512, ffn_hidden_size=1536, seq_length=256, vocab_size=256),
}
# (tensor, pipeline, data, virtual_stages, micro_batch_size, recompute)
LAYOUTS = [
    (1, 1, 1, 1, 1, False), (1, 1, 1, 1, 4, False), (1, 1, 1, 1, 2, True),
    (1, 1, 2, 1, 2, False), (2, 1, 1, 1, 2, False), (1, 2, 1, 1, 1, False),
    (1, 2, 1, 2, 1, False), (2, 2, 1, 1, 1, False), (2, 1, 2, 1, 1, False),
    (1, 1, 4, 1, 1, False), (4, 1, 1, 1, 2, False), (1, 4, 1, 1, 1, False),
]
GLOBAL_BATCH = 8


def spec_for(model, layout, steps):
    t, p, d, v, b, recompute = layout
    return {
        "name": "planner-check",
        "model": MODELS[model],
        "parallel": {"tensor": t, "pipeline": p, "data": d, "virtual_stages": v,
                     "micro_batch_size": b, "global_batch_size": GLOBAL_BATCH,
                     "schedule": "SCHEDULE_INTERLEAVED_1F1B" if v > 1 else "SCHEDULE_1F1B"},
        "train": {"steps": steps, "dropout": 0.0, "recompute": recompute, "seed": 1},
        "device": "DEVICE_CPU",
    }


def layout_name(layout):
    t, p, d, v, b, recompute = layout
    return f"t{t} p{p} d{d} v{v} b{b}" + (" recompute" if recompute else "")


def measure(spec_path, world, args, tmp):
    out = pathlib.Path(tmp, "run")
    threads = max(1, args.cores // world)
    subprocess.run([str(BIN / "worker/launch"), f"--spec={spec_path}", f"--out_dir={out}",
                    f"--threads_per_rank={threads}"], check=True, stdout=subprocess.DEVNULL,
                   cwd=ROOT)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in rows if r["step"] > args.warmup]
    return (statistics.median(r["step_seconds"] for r in timed),
            max(r.get("host_memory_peak_bytes", 0) for r in rows))


def predict(spec_path, world, args):
    result = subprocess.run([str(BIN / "plan/predict_step"), f"--spec={spec_path}",
                             f"--cluster={args.cluster}", f"--ranks_per_device={world}"],
                            check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", default=str(ROOT / "deploy/clusters/cpu_host.json"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--models", default="small,large")
    parser.add_argument("--confirm", type=int, default=3)
    parser.add_argument("--only", default="",
                        help="comma-separated layout names to run (e.g. 't1 p1 d1 v1 b1,"
                             "t1 p1 d1 v1 b4'); default all")
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    all_rows, memory_errors = [], []
    print(f"{'model':11} {'layout':28} {'predicted s':>11} {'measured s':>10} {'error':>7} "
          f"{'memory est MiB':>14} {'engine MiB':>10} {'error':>7}")
    for model in args.models.split(","):
        rows = []
        for layout in LAYOUTS:
            t, p, d, v, b, recompute = layout
            world = t * p * d
            if only and layout_name(layout) not in only:
                continue
            if MODELS[model].get("num_kv_heads", t) % t != 0:
                continue  # spec/ refuses it: each tensor rank holds whole key-value heads
            with tempfile.TemporaryDirectory() as tmp:
                spec_path = pathlib.Path(tmp, "spec.json")
                spec_path.write_text(json.dumps(spec_for(model, layout, args.steps)))
                try:
                    predicted = predict(spec_path, world, args)
                    measured, heap = measure(spec_path, world, args, tmp)
                except subprocess.CalledProcessError as error:
                    print(f"{model:11} {str(layout):28} failed: {error}", file=sys.stderr)
                    continue
            error = predicted["step_seconds"] / measured - 1
            memory = predicted["last_stage_memory_bytes"]
            memory_error = memory / heap - 1 if heap else float("nan")
            memory_errors.append(abs(memory_error))
            name = layout_name(layout)
            rows.append({"model": model, "name": name, "layout": layout,
                         "predicted": predicted["step_seconds"],
                         "runs": [measured]})
            all_rows.append(rows[-1])
            print(f"{model:11} {name:28} {predicted['step_seconds']:11.4f} {measured:10.4f} "
                  f"{100 * error:+6.1f}% {memory / 2**20:14.1f} {heap / 2**20:10.1f} "
                  f"{100 * memory_error:+6.1f}%", flush=True)
        if rows:
            first = min(rows, key=lambda r: r["predicted"])
            fastest = min(rows, key=lambda r: r["runs"][0])
            if first is not fastest:
                # Alternate the two so that both see the same phases of the host's speed.
                for _ in range(args.confirm):
                    for row in (first, fastest):
                        with tempfile.TemporaryDirectory() as tmp:
                            spec_path = pathlib.Path(tmp, "spec.json")
                            spec_path.write_text(
                                json.dumps(spec_for(model, row["layout"], args.steps)))
                            t, p, d = row["layout"][:3]
                            row["runs"].append(measure(spec_path, t * p * d, args, tmp)[0])
            first_s = statistics.median(first["runs"])
            fastest_s = statistics.median(fastest["runs"])
            print(f"{model}: model's first choice {first['name']} measured {first_s:.4f} s; "
                  f"measured fastest {fastest['name']} {fastest_s:.4f} s "
                  f"({100 * (first_s / fastest_s - 1):+.1f}%"
                  + (f", medians of {len(first['runs'])} runs each)" if first is not fastest
                     else ")"))
    # Layouts measured more than once (the disputed first choices) count with their median.
    errors = [abs(r["predicted"] / statistics.median(r["runs"]) - 1) for r in all_rows]
    for r in all_rows:
        if len(r["runs"]) > 1:
            median = statistics.median(r["runs"])
            print(f"{r['model']} {r['name']}: median of {len(r['runs'])} runs {median:.4f} s, error "
                  f"{100 * (r['predicted'] / median - 1):+.1f}%")
    if errors:
        print(f"step time: median absolute error {100 * statistics.median(errors):.1f}%, "
              f"worst {100 * max(errors):.1f}% over {len(errors)} layouts")
        print(f"memory: median absolute error {100 * statistics.median(memory_errors):.1f}%, "
              f"worst {100 * max(memory_errors):.1f}%")


if __name__ == "__main__":
    main()
