#!/usr/bin/env python3
"""GPU training throughput of the engine vs PyTorch on the same GPT and batch (issue 7).

For each config, PyTorch trains the same GPT-2 architecture (tests/bench/pytorch_gpt.py,
the model the CPU benchmark uses too: pre-LN, GeLU tanh, tied embeddings,
F.scaled_dot_product_attention with is_causal, fused AdamW; here bf16 autocast over fp32
weights) eager and under torch.compile; then the engine (`train`, if --engine is given)
runs the same spec with precision bf16 on the GPU. Prints tokens/s, step time, MFU and peak
memory side by side, with the engine / torch.compile ratio last.

MFU by three formulas: Megatron's (ARCHITECTURE.md), 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
FLOPs per step; PaLM's 6N + 12 L H Q T FLOPs per token (N parameters, H heads of size Q, T
the sequence); llm.c's 6N + 6 L C T per token (causal attention counted at half). Each
against --peak_tflops (default 989: H100/H200 SXM dense bf16, the datasheet) and PaLM's
also against the card's bf16 GEMM rate measured in the same run (8192^3 torch.matmul).
The engine runs twice: as configured (cuDNN's fused attention where it runs) and with
MTRAIN_ATTENTION=handwritten (its own flash kernels). Timing: CUDA events, median of the
steps after --warmup.

On the GPU machine (PyTorch there already):
  python3 tests/bench/gpu_vs_pytorch.py --configs gpt2-124m,gpt-1.3b --engine BUNDLE/bin/train
On a machine without a GPU it runs on the CPU (a check of the script, not a benchmark):
  python3 tests/bench/gpu_vs_pytorch.py --configs tiny --steps 4 --warmup 1 --no-compile
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


def parameter_count(cfg):
    """Parameters of the GPT (tied output layer counted once, learned positions)."""
    h, l = cfg["hidden"], cfg["layers"]
    return l * (12 * h * h + 13 * h) + pytorch_gpt.padded_vocab(cfg["vocab"]) * h + \
        cfg["seq"] * h + 2 * h


def palm_flops_per_step(cfg):
    n, head = parameter_count(cfg), cfg["hidden"] // cfg["heads"]
    per_token = 6 * n + 12 * cfg["layers"] * cfg["heads"] * head * cfg["seq"]
    return per_token * cfg["batch"] * cfg["seq"]


def llmc_flops_per_step(cfg):
    per_token = 6 * parameter_count(cfg) + 6 * cfg["layers"] * cfg["hidden"] * cfg["seq"]
    return per_token * cfg["batch"] * cfg["seq"]


def measured_gemm_tflops(torch):
    """The card's bf16 GEMM rate: median of 10 8192^3 matmuls after 3 (0 without a GPU)."""
    if not torch.cuda.is_available():
        return 0.0
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192**3 / statistics.median(times) / 1e12


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


def bench_engine(cfg, args, attention="auto", fusions="all"):
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
        env = dict(os.environ, MTRAIN_ATTENTION=attention, MTRAIN_GEMM_FUSIONS=fusions)
        run = subprocess.run([args.engine, f"--spec={spec_path}", f"--metrics_jsonl={metrics}"],
                             capture_output=True, text=True, env=env)
        # The engine's line names the attention path ("attention: cuDNN 9.x fused ...").
        print(f"  engine ({attention}): " + next(
            (line.strip() for line in (run.stdout + run.stderr).splitlines()
             if "attention:" in line), "no engine line"), flush=True)
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
    parser.add_argument("--no-hand-attention", action="store_true",
                        help="skip the engine's row with MTRAIN_ATTENTION=handwritten")
    parser.add_argument("--fusion-variants", default="",
                        help="more engine rows, one per MTRAIN_GEMM_FUSIONS value, '|'-separated, "
                             "'+' for ',' (e.g. 'none|dgelu+residual'); first config only")
    parser.add_argument("--engine-only", action="store_true",
                        help="the engine's rows only (no PyTorch), e.g. beside a kernel profile")
    args = parser.parse_args()
    import torch
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (not a benchmark)"
    gemm = measured_gemm_tflops(torch)
    print(f"device: {device}; torch {torch.__version__}; bf16 autocast; median of {args.steps} "
          f"steps after {args.warmup}; MFU against {args.peak_tflops:.0f} TFLOP/s (datasheet) "
          f"and {gemm:.0f} TFLOP/s (measured bf16 GEMM)", flush=True)
    header = (f"{'config':<11} {'implementation':<28} {'tokens/s':>12} {'step ms':>9} "
              f"{'MFU-Meg':>7} {'MFU-PaLM':>7} {'MFU-llmc':>7} {'PaLM/GEMM':>7} {'vs comp':>6} "
              f"{'peak mem':>9} {'loss':>8}")
    rows = []
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        tokens = cfg["batch"] * cfg["seq"]
        # The engine first: a run cut short by a time limit still has its numbers. Each row
        # is printed as soon as it is measured; the table (with the ratio to
        # torch.compile) follows at the end.
        runs = []
        plan = []
        if args.engine:
            plan.append(("mtrain", lambda: bench_engine(cfg, args)))
            if not args.no_hand_attention:
                plan.append(("mtrain hand-att", lambda: bench_engine(cfg, args, "handwritten")))
            if args.fusion_variants and name == args.configs.split(",")[0]:
                for variant in args.fusion_variants.split("|"):
                    fusions = variant.replace("+", ",")
                    plan.append((f"mtrain fuse={variant}",
                                 lambda fusions=fusions: bench_engine(cfg, args, "auto", fusions)))
        if not args.engine_only:
            plan.append(("PyTorch eager", lambda: bench_torch(cfg, False, args, torch)))
        if not args.no_compile and not args.engine_only:
            plan.append(("PyTorch compile", lambda: bench_torch(cfg, True, args, torch)))
        for label, measure in plan:
            r = measure()
            runs.append((label, r))
            if "error" not in r:
                print(f"  {name} {label}: {tokens / r['step_seconds']:.0f} tokens/s, "
                      f"{r['step_seconds'] * 1e3:.1f} ms a step", flush=True)
        compiled = dict(runs).get("PyTorch compile")
        for label, r in runs:
            if "error" in r:
                rows.append((name, label, r["error"]))
                continue
            tps = tokens / r["step_seconds"]
            peak_flops = args.peak_tflops * 1e12
            mfu = model_flops_per_step(cfg) / r["step_seconds"] / peak_flops
            palm = palm_flops_per_step(cfg) / r["step_seconds"]
            llmc = llmc_flops_per_step(cfg) / r["step_seconds"]
            palm_measured = f"{100 * palm / (gemm * 1e12):6.1f}%" if gemm > 0 else "     -"
            ratio = (f"{compiled['step_seconds'] / r['step_seconds']:5.2f}x"
                     if compiled and "error" not in compiled else "    -")
            peak = "-" if math.isnan(r["peak_bytes"]) else f"{r['peak_bytes'] / 2**30:.1f} GiB"
            rows.append((name, label, f"{tps:12.0f} {r['step_seconds'] * 1e3:9.1f} "
                                      f"{100 * mfu:6.1f}% {100 * palm / peak_flops:6.1f}% "
                                      f"{100 * llmc / peak_flops:6.1f}% {palm_measured} "
                                      f"{ratio} {peak:>9} {r['loss']:8.4f}"))
        print(header)
        for row_name, label, text in rows:
            print(f"{row_name:<11} {label:<28} {text}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
