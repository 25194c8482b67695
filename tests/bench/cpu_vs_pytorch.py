#!/usr/bin/env python3
"""CPU training throughput and memory of the engine vs PyTorch as a user writes it (issue 17).

For each shape, in one run, on the same threads, fp32, the same batch and the same data
(byte tokens of the shipped corpus, tests/data/shakespeare.txt, which the engine's default
spec reads):
  - the engine: `bazel-bin/worker/train` on the equivalent spec (dropout 0);
  - PyTorch eager: the nanoGPT-style model of tests/bench/pytorch_gpt.py (nn.Linear,
    F.scaled_dot_product_attention with is_causal, tanh GeLU, foreach AdamW, clip 1.0);
    for the Llama shape, transformers' LlamaForCausalLM (SDPA attention, the same
    optimizer and clipping, the loss over the same targets);
  - the same under torch.compile.
With --precision bf16: the engine's PRECISION_BF16 (its GEMMs' operands in bf16, issue 32),
its own fp32 run beside it, and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16).
Each runs in its own process, so its peak resident memory (max RSS) is its own. Prints
the processor (model name, family/model, the vector flags that matter to a GEMM), the
engine's GEMM library and kernel and PyTorch's CPU capability first, then tokens/s and step
ms (median of the timed steps after --warmup), the peak RSS, and the engine's ratio to the
faster of eager and compile: one table per processor in docs/PERFORMANCE.md.

  bazel build //worker:train
  pip install torch            # PyPI; the GPU machine has it already
  python3 tests/bench/cpu_vs_pytorch.py [--threads 2] [--steps 10] [--warmup 3]
      [--shapes small,medium,large,llama_small] [--no-compile] [--precision bf16]
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = ROOT / "tests" / "data" / "shakespeare.txt"
sys.path.insert(0, str(HERE))

SHAPES = {
    # name: layers, hidden, heads, seq, vocab, batch (the three shapes)
    "small": dict(layers=4, hidden=256, heads=4, seq=256, vocab=256, batch=8),
    "medium": dict(layers=4, hidden=512, heads=8, seq=512, vocab=256, batch=4),
    "large": dict(layers=4, hidden=768, heads=12, seq=1024, vocab=256, batch=2),
    # A Llama-style decoder (issue 33) of the small shape's width: 2 key-value heads,
    # SwiGLU of the family's default width (768), rotary positions, untied output.
    "llama_small": dict(layers=4, hidden=256, heads=4, seq=256, vocab=256, batch=8,
                        family="llama", kv_heads=2, ffn=768),
}


def engine_spec(cfg, steps, precision="fp32"):
    model = {"num_layers": cfg["layers"], "num_heads": cfg["heads"],
             "hidden_size": cfg["hidden"], "seq_length": cfg["seq"], "vocab_size": cfg["vocab"]}
    if cfg.get("family") == "llama":
        model.update({"family": "MODEL_FAMILY_LLAMA", "num_kv_heads": cfg["kv_heads"],
                      "ffn_hidden_size": cfg["ffn"]})
    return {
        "name": "cpu-bench",
        "model": model,
        "parallel": {"micro_batch_size": cfg["batch"], "global_batch_size": cfg["batch"]},
        "train": {"dropout": 0.0, "seed": 1, "steps": steps},
        "device": "DEVICE_CPU",
        "precision": "PRECISION_BF16" if precision == "bf16" else "PRECISION_FP32",
    }


def run_engine(cfg, args):
    """In this (child) process: runs `train`; step times from its metrics lines."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = pathlib.Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(engine_spec(cfg, args.warmup + args.steps,
                                                    args.precision)))
        metrics = pathlib.Path(tmp, "metrics.jsonl")
        run = subprocess.run([str(ROOT / "bazel-bin/worker/train"), f"--spec={spec_path}",
                              f"--metrics_jsonl={metrics}", f"--threads={args.threads}"],
                             check=True, capture_output=True, text=True, cwd=ROOT)
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    engine_line = next((line for line in (run.stdout + run.stderr).splitlines()
                        if line.startswith("engine:")), "")
    timed = rows[args.warmup:]
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"step_seconds": statistics.median(r["step_seconds"] for r in timed),
            "peak_bytes": peak_kib * 1024, "loss": rows[-1]["loss"],
            "heap_peak_bytes": rows[-1].get("host_memory_peak_bytes", 0),
            "mfu": statistics.median(r.get("mfu", 0) for r in timed),
            "engine_line": engine_line}


def llama_model(torch, cfg):
    """transformers' LlamaForCausalLM of the shape, called as model(inputs, targets) -> loss."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                         intermediate_size=cfg["ffn"], num_hidden_layers=cfg["layers"],
                         num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                         max_position_embeddings=cfg["seq"], rms_norm_eps=1e-5,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    config._attn_implementation = "sdpa"
    llama = LlamaForCausalLM(config)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.llama = llama

        def forward(self, inputs, targets):
            logits = self.llama(input_ids=inputs).logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                     targets.reshape(-1))
    return WithLoss()


def run_torch(cfg, args, compiled):
    """In this (child) process: trains the PyTorch model; wall-clock step times."""
    import torch
    import pytorch_gpt
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if cfg.get("family") == "llama":
        model = llama_model(torch, cfg)
    else:
        model = pytorch_gpt.build_model(torch, cfg["layers"], cfg["hidden"], cfg["heads"],
                                        cfg["seq"], cfg["vocab"])
    opt = pytorch_gpt.build_optimizer(torch, model, "cpu")
    step_fn = torch.compile(model) if compiled else model
    corpus = torch.frombuffer(bytearray(CORPUS.read_bytes()), dtype=torch.uint8).long()
    generator = torch.Generator().manual_seed(1)
    B, S = cfg["batch"], cfg["seq"]
    times = []
    for step in range(args.warmup + args.steps):
        starts = torch.randint(0, corpus.numel() - S - 1, (B,), generator=generator)
        windows = torch.stack([corpus[s:s + S + 1] for s in starts.tolist()])
        t0 = time.perf_counter()
        if args.precision == "bf16":
            # CPU autocast as users write it: matmuls (and SDPA) in bf16, the rest fp32.
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = step_fn(windows[:, :-1], windows[:, 1:])
        else:
            loss = step_fn(windows[:, :-1], windows[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(seconds)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"step_seconds": statistics.median(times), "peak_bytes": peak_kib * 1024,
            "loss": float(loss.detach()), "version": torch.__version__,
            "capability": torch.backends.cpu.get_cpu_capability()}


GEMM_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
              "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16")


def processor():
    """'model name (vendor family F model M): flags' from /proc/cpuinfo's first processor."""
    fields = {}
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = [f for f in GEMM_FLAGS if f in fields.get("flags", "").split()]
    return (f"{fields.get('model name', '?')} ({fields.get('vendor_id', '?')} family "
            f"{fields.get('cpu family', '?')} model {fields.get('model', '?')}), "
            f"{os.cpu_count()} cpus: {' '.join(flags) or 'no AVX'}")


def measure(kind, shape, args):
    """Runs one measurement in a fresh process (its own max RSS); returns its JSON."""
    precision = args.precision
    if kind == "engine_fp32":
        kind, precision = "engine", "fp32"
    command = [sys.executable, __file__, "--child", kind, "--shapes", shape,
               "--threads", str(args.threads), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--precision", precision]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": (run.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--shapes", default="small,medium,large")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every implementation this many times, interleaved, and "
                             "keep each one's fastest run (a shared machine's speed drifts)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: the engine's PRECISION_BF16 and PyTorch's CPU autocast, "
                             "with the engine's own fp32 beside them")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        cfg = SHAPES[args.shapes]
        result = (run_engine(cfg, args) if args.child == "engine"
                  else run_torch(cfg, args, compiled=args.child == "compile"))
        print(json.dumps(result))
        return 0

    kinds = (["engine"] + (["engine_fp32"] if args.precision == "bf16" else []) + ["eager"] +
             ([] if args.no_compile else ["compile"]))
    print(f"processor: {processor()}")
    labels = {"engine": "mtrain engine", "engine_fp32": "engine in fp32",
              "eager": "PyTorch eager", "compile": "PyTorch compile"}
    print(f"{args.precision}, {args.threads} threads, median of {args.steps} steps after {args.warmup}, "
          f"fastest of {args.repeats} interleaved run(s); peak = max RSS of the process; heap = "
          f"the engine's own report (host_memory_peak_bytes: parameters, gradients, moments, "
          f"activations, workspace)")
    print(f"{'shape':<7} {'implementation':<16} {'tokens/s':>9} {'step ms':>9} {'peak MiB':>9} "
          f"{'heap MiB':>9} {'loss':>7}")
    for shape in args.shapes.split(","):
        cfg = SHAPES[shape]
        tokens = cfg["batch"] * cfg["seq"]
        results = {}
        for _ in range(args.repeats):
            for kind in kinds:
                r = measure(kind, shape, args)
                best = results.get(kind)
                if best is None or "error" in best or (
                        "error" not in r and r["step_seconds"] < best["step_seconds"]):
                    results[kind] = r
        if shape == args.shapes.split(",")[0]:
            if results["engine"].get("engine_line"):
                print(results["engine"]["engine_line"])
            if "version" in results.get("eager", {}):
                print(f"PyTorch {results['eager']['version']}, CPU capability "
                      f"{results['eager']['capability']}")
        for kind in kinds:
            r = results[kind]
            if "error" in r:
                print(f"{shape:<7} {labels[kind]:<16} failed: {r['error']}")
                continue
            heap = (f"{r['heap_peak_bytes'] / 2**20:>9.0f}" if r.get("heap_peak_bytes")
                    else f"{'':>9}")
            print(f"{shape:<7} {labels[kind]:<16} {tokens / r['step_seconds']:>9.0f} "
                  f"{r['step_seconds'] * 1e3:>9.1f} {r['peak_bytes'] / 2**20:>9.0f} {heap} "
                  f"{r['loss']:>7.3f}")
        torch_rows = [results[k] for k in kinds
                      if k in ("eager", "compile") and "error" not in results[k]]
        own = results.get("engine_fp32", {})
        if "step_seconds" in own and "error" not in results["engine"]:
            print(f"{shape:<7} engine bf16 / engine fp32: "
                  f"{own['step_seconds'] / results['engine']['step_seconds']:.2f}x tokens/s")
        if "error" not in results["engine"] and torch_rows:
            fastest = min(r["step_seconds"] for r in torch_rows)
            leanest = min(r["peak_bytes"] for r in torch_rows)
            print(f"{shape:<7} engine / faster PyTorch: {fastest / results['engine']['step_seconds']:.2f}x "
                  f"tokens/s, {results['engine']['peak_bytes'] / leanest:.2f}x peak memory, "
                  f"engine MFU {100 * results['engine']['mfu']:.1f}% "
                  f"(L={cfg['layers']} h={cfg['hidden']} heads={cfg['heads']} s={cfg['seq']} "
                  f"V={cfg['vocab']} B={cfg['batch']}"
                  f"{', Llama kv_heads=%d ffn=%d' % (cfg['kv_heads'], cfg['ffn']) if cfg.get('family') else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
