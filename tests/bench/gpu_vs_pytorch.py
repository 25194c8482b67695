#!/usr/bin/env python3
"""GPU training throughput of the engine vs PyTorch on the same GPT and batch (issue 7).

For each config, PyTorch trains the same GPT-2 architecture (tests/bench/pytorch_gpt.py,
the model the CPU benchmark uses too: pre-LN, GeLU tanh, tied embeddings,
F.scaled_dot_product_attention with is_causal, fused AdamW; here bf16 autocast over fp32
weights) eager and under torch.compile; then the engine (`train`, if --engine is given)
runs the same spec with precision bf16 on the GPU. Prints tokens/s, step time, MFU and peak
memory side by side, with the engine / torch.compile ratio last.

MFU uses ARCHITECTURE.md's formula, 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) FLOPs per step,
against --peak_tflops (default 989: H100 SXM dense bf16; the measured 8192^3 bf16 GEMM peak
is about 790). Timing: CUDA events, median of the steps after --warmup.

On the GPU machine (PyTorch there already):
  python3 tests/bench/gpu_vs_pytorch.py --configs gpt2-124m,gpt-1.3b --engine BUNDLE/bin/train
On a machine without a GPU it runs on the CPU (a check of the script, not a benchmark):
  python3 tests/bench/gpu_vs_pytorch.py --configs tiny --steps 4 --warmup 1 --no-compile
"""
import argparse
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import pytorch_gpt  # noqa: E402  the one PyTorch model definition both benchmarks use

CONFIGS = {
    # name: layers, hidden, heads, seq, vocab, micro batch
    "tiny": dict(layers=2, hidden=64, heads=4, seq=64, vocab=256, batch=4),
    "gpt2-124m": dict(layers=12, hidden=768, heads=12, seq=1024, vocab=50257, batch=16),
    "gpt-1.3b": dict(layers=24, hidden=2048, heads=16, seq=2048, vocab=50257, batch=4),
}


def model_flops_per_step(cfg):
    """Megatron's model FLOPs per iteration without recomputation."""
    return pytorch_gpt.model_flops_per_step(cfg["layers"], cfg["hidden"], cfg["seq"],
                                            cfg["vocab"], cfg["batch"])


def build_torch_model(cfg, torch):
    return pytorch_gpt.build_model(torch, cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq"],
                                   cfg["vocab"])


def bench_torch(cfg, compiled, args, torch):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = build_torch_model(cfg, torch).to(device)
    opt = pytorch_gpt.build_optimizer(torch, model, device)
    step_fn = torch.compile(model) if compiled else model
    dtype = torch.bfloat16
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), device=device)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        with torch.autocast(device_type=device, dtype=dtype):
            loss = step_fn(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            seconds = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(seconds)
    step_seconds = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else float("nan")
    return {"step_seconds": step_seconds, "peak_bytes": peak, "loss": float(loss.detach())}


def bench_engine(cfg, args):
    spec = {
        "name": "gpu-bench",
        "model": {"num_layers": cfg["layers"], "num_heads": cfg["heads"],
                  "hidden_size": cfg["hidden"], "seq_length": cfg["seq"],
                  "vocab_size": cfg["vocab"]},
        "parallel": {"micro_batch_size": cfg["batch"], "global_batch_size": cfg["batch"]},
        "train": {"steps": args.warmup + args.steps, "dropout": 0.0, "seed": 1},
        "precision": "PRECISION_BF16",
        "device": "DEVICE_CUDA",
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = pathlib.Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec))
        metrics = pathlib.Path(tmp, "metrics.jsonl")
        run = subprocess.run([args.engine, f"--spec={spec_path}", f"--metrics_jsonl={metrics}"],
                             capture_output=True, text=True)
        if run.returncode != 0 or not metrics.exists():
            reason = (run.stderr.strip().splitlines() or ["no output"])[-1]
            return {"error": reason}
        rows = [json.loads(line) for line in metrics.read_text().splitlines()][args.warmup:]
    return {"step_seconds": statistics.median(r["step_seconds"] for r in rows),
            "peak_bytes": float(rows[-1].get("device_memory_peak_bytes", "nan")),
            "loss": rows[-1]["loss"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="gpt2-124m,gpt-1.3b")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--peak_tflops", type=float, default=989.0)
    parser.add_argument("--engine", default="", help="path to the engine's `train` binary")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    import torch
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (not a benchmark)"
    print(f"device: {device}; torch {torch.__version__}; bf16 autocast; median of {args.steps} "
          f"steps after {args.warmup}; MFU against {args.peak_tflops:.0f} TFLOP/s")
    rows = []
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        tokens = cfg["batch"] * cfg["seq"]
        runs = [("PyTorch eager", bench_torch(cfg, False, args, torch))]
        if not args.no_compile:
            runs.append(("PyTorch compile", bench_torch(cfg, True, args, torch)))
        if args.engine:
            runs.append(("mtrain", bench_engine(cfg, args)))
        for label, r in runs:
            if "error" in r:
                rows.append((name, label, r["error"]))
                continue
            tps = tokens / r["step_seconds"]
            mfu = model_flops_per_step(cfg) / r["step_seconds"] / (args.peak_tflops * 1e12)
            peak = "-" if math.isnan(r["peak_bytes"]) else f"{r['peak_bytes'] / 2**30:.1f} GiB"
            rows.append((name, label, f"{tps:12.0f} {r['step_seconds'] * 1e3:9.1f} "
                                      f"{100 * mfu:6.1f}% {peak:>9} {r['loss']:8.4f}"))
    print(f"{'config':<11} {'implementation':<16} {'tokens/s':>12} {'step ms':>9} {'MFU':>7} "
          f"{'peak mem':>9} {'loss':>8}")
    for name, label, text in rows:
        print(f"{name:<11} {label:<16} {text}")


if __name__ == "__main__":
    sys.exit(main())
