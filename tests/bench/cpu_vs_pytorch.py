#!/usr/bin/env python3
"""CPU training throughput of the engine vs PyTorch on the same GPT-2, batch and threads.

Runs `bazel-bin/worker/train` on a fixed spec, then the same model in PyTorch (eager, fp32,
the reference implementation of tests/parity/gpt2_reference.py) with the same batch, on the
same number of threads, and prints tokens/s (median of the timed steps) side by side.

  bazel build //worker:train
  python3 tests/bench/cpu_vs_pytorch.py [--threads 2] [--steps 12]
"""
import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "parity"))

SPEC = {
    "name": "cpu-bench",
    "model": {"num_layers": 4, "num_heads": 4, "hidden_size": 256, "seq_length": 256,
              "vocab_size": 256},
    "parallel": {"micro_batch_size": 8, "global_batch_size": 8},
    "train": {"dropout": 0.0, "seed": 1},
    "device": "DEVICE_CPU",
}


def bench_engine(steps, threads):
    spec = json.loads(json.dumps(SPEC))
    spec["train"]["steps"] = steps
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = pathlib.Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec))
        metrics = pathlib.Path(tmp, "metrics.jsonl")
        subprocess.run([str(ROOT / "bazel-bin/worker/train"), f"--spec={spec_path}",
                        f"--metrics_jsonl={metrics}", f"--threads={threads}"],
                       check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    timed = rows[2:]  # the first steps warm caches and the allocator
    return (statistics.median(r["tokens_per_second"] for r in timed),
            statistics.median(r["step_seconds"] for r in timed), rows[-1]["loss"])


def bench_torch(steps, threads):
    import torch
    from gpt2_reference import Gpt2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m, p = SPEC["model"], SPEC["parallel"]
    C, S, L, V = m["hidden_size"], m["seq_length"], m["num_layers"], m["vocab_size"]
    cfg = {"layers": L, "heads": m["num_heads"], "hidden": C, "vocab": V}
    w = {"wte": torch.randn(V, C) * 0.02, "wpe": torch.randn(S, C) * 0.02,
         "lnf.weight": torch.ones(C), "lnf.bias": torch.zeros(C)}
    for i in range(L):
        q = f"layers.{i}."
        w.update({q + "ln1.weight": torch.ones(C), q + "ln1.bias": torch.zeros(C),
                  q + "ln2.weight": torch.ones(C), q + "ln2.bias": torch.zeros(C),
                  q + "attn.qkv.weight": torch.randn(3, C, C) * 0.02,
                  q + "attn.qkv.bias": torch.zeros(3, C),
                  q + "attn.proj.weight": torch.randn(C, C) * 0.02,
                  q + "attn.proj.bias": torch.zeros(C),
                  q + "mlp.fc.weight": torch.randn(4 * C, C) * 0.02,
                  q + "mlp.fc.bias": torch.zeros(4 * C),
                  q + "mlp.proj.weight": torch.randn(C, 4 * C) * 0.02,
                  q + "mlp.proj.bias": torch.zeros(C)})
    model = Gpt2(w, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    B = p["global_batch_size"]
    times = []
    for _ in range(steps):
        tokens = torch.randint(0, V, (B, S + 1))
        start = time.perf_counter()
        opt.zero_grad()
        loss = model.loss(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
    step = statistics.median(times[2:])
    return B * S / step, step, torch.__version__


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    ours_tps, ours_step, ours_loss = bench_engine(args.steps, args.threads)
    torch_tps, torch_step, version = bench_torch(args.steps, args.threads)
    m, p = SPEC["model"], SPEC["parallel"]
    print(f"GPT-2 L={m['num_layers']} h={m['hidden_size']} heads={m['num_heads']} "
          f"s={m['seq_length']} V={m['vocab_size']} batch={p['global_batch_size']} fp32, "
          f"{args.threads} threads, median of steps 3..{args.steps}")
    print(f"{'implementation':<24}{'tokens/s':>12}{'step ms':>10}")
    print(f"{'mtrain engine':<24}{ours_tps:>12.0f}{ours_step * 1e3:>10.1f}")
    print(f"{'PyTorch ' + version + ' eager':<24}{torch_tps:>12.0f}{torch_step * 1e3:>10.1f}")
    print(f"ratio (engine / PyTorch): {ours_tps / torch_tps:.2f}")


if __name__ == "__main__":
    main()
