#!/usr/bin/env python3
"""PyTorch reference for the engine's GPT-2: regenerates gpt2_reference.safetensors.

The engine writes its initial weights (bazel-bin/tests/parity/write_parity_weights); this
script builds the same GPT-2 in PyTorch from those weights, independently of the engine's
code (torch's own LayerNorm, GeLU(tanh), softmax attention, cross-entropy, AdamW and
clip_grad_norm_), and records:
  weights.*            the initial weights (as the engine wrote them)
  tokens               [steps, batch, seq + 1] input/target windows
  logits               [batch * seq, padded_vocab] of step 1
  loss                 [1] mean cross-entropy of step 1
  grad.*               every gradient of step 1
  step_losses          [steps] losses of `steps` AdamW steps (clipped, scheduled lr)
  final.*              the weights after those steps
The C++ test //tests/parity:gpt2_parity_test compares the engine against this file; with
--model=gpu the same is written for the GPU parity model (head dimension 32, which the
CUDA attention takes) into gpu_parity_reference.safetensors, for the gpu-tagged
//tests/parity:cuda_parity_test.

  bazel build //tests/parity:write_parity_weights
  python3 tests/parity/gpt2_reference.py [--model=gpu]   # needs torch, safetensors (PyPI)
"""
import argparse
import json
import math
import pathlib
import subprocess
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def lr_at(step, cfg):
    """Linear warm-up then cosine to the floor; step is 1-based."""
    lr, min_lr, warmup, decay = cfg["lr"], cfg["min_lr"], cfg["warmup_steps"], cfg["decay_steps"]
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup) if decay > warmup else 1.0
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * ratio))


class Gpt2(torch.nn.Module):
    """GPT-2 as in the paper/HF: pre-LN blocks, GeLU(tanh), tied output layer."""

    def __init__(self, w, cfg):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(v.clone()) for k, v in w.items()})

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, tokens):
        cfg = self.cfg
        B, S = tokens.shape
        C, H = cfg["hidden"], cfg["heads"]
        D = C // H
        x = self.w("wte")[tokens] + self.w("wpe")[:S]
        mask = torch.ones(S, S, dtype=torch.bool).tril()
        for i in range(cfg["layers"]):
            p = f"layers.{i}."
            a = F.layer_norm(x, (C,), self.w(p + "ln1.weight"), self.w(p + "ln1.bias"), 1e-5)
            qkv = F.linear(a, self.w(p + "attn.qkv.weight").reshape(3 * C, C),
                           self.w(p + "attn.qkv.bias").reshape(3 * C))
            q, k, v = qkv.split(C, dim=-1)
            q, k, v = (t.view(B, S, H, D).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, S, C)
            x = x + F.linear(y, self.w(p + "attn.proj.weight"), self.w(p + "attn.proj.bias"))
            m = F.layer_norm(x, (C,), self.w(p + "ln2.weight"), self.w(p + "ln2.bias"), 1e-5)
            m = F.gelu(F.linear(m, self.w(p + "mlp.fc.weight"), self.w(p + "mlp.fc.bias")),
                       approximate="tanh")
            x = x + F.linear(m, self.w(p + "mlp.proj.weight"), self.w(p + "mlp.proj.bias"))
        x = F.layer_norm(x, (C,), self.w("lnf.weight"), self.w("lnf.bias"), 1e-5)
        return x @ self.w("wte").t()  # [B, S, padded_vocab]

    def loss(self, logits, targets):
        vocab = self.cfg["vocab"]  # padded columns never enter the softmax
        return F.cross_entropy(logits[..., :vocab].reshape(-1, vocab), targets.reshape(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["cpu", "gpu"], default="cpu")
    args = parser.parse_args()
    init_path = HERE / "parity_init.safetensors"
    writer = ROOT / "bazel-bin/tests/parity/write_parity_weights"
    if not writer.exists():
        sys.exit(f"{writer} missing: run `bazel build //tests/parity:write_parity_weights`")
    subprocess.run([str(writer), f"--output={init_path}", f"--model={args.model}"], check=True)
    with open(init_path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        cfg = json.loads(json.loads(f.read(header_len))["__metadata__"]["config"])
    weights = load_file(str(init_path))
    init_path.unlink()

    torch.manual_seed(cfg["data_seed"])
    steps, B, S = cfg["steps"], cfg["batch"], cfg["seq"]
    tokens = torch.randint(0, cfg["vocab"], (steps, B, S + 1), dtype=torch.int64)

    model = Gpt2(weights, cfg).double() if cfg.get("float64") else Gpt2(weights, cfg)
    decay = [p for n, p in model.p.items() if not (n.endswith("__bias") or "ln" in n)]
    no_decay = [p for n, p in model.p.items() if n.endswith("__bias") or "ln" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    out = {f"weights.{k}": v.contiguous() for k, v in weights.items()}
    out["tokens"] = tokens.to(torch.int32)
    step_losses = []
    for step in range(1, steps + 1):
        inputs, targets = tokens[step - 1, :, :-1], tokens[step - 1, :, 1:]
        opt.zero_grad()
        logits = model(inputs)
        loss = model.loss(logits, targets)
        loss.backward()
        if step == 1:
            out["logits"] = logits.detach().reshape(B * S, -1).contiguous()
            out["loss"] = loss.detach().reshape(1)
            for name, param in model.p.items():
                out["grad." + name.replace("__", ".")] = param.grad.detach().clone()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.step()
        step_losses.append(loss.item())
    out["step_losses"] = torch.tensor(step_losses, dtype=torch.float64)
    for name, param in model.p.items():
        out["final." + name.replace("__", ".")] = param.detach().clone()
    target = HERE / ("gpu_parity_reference.safetensors" if args.model == "gpu"
                     else "gpt2_reference.safetensors")
    save_file({k: v.contiguous() for k, v in out.items()}, str(target),
              metadata={"config": json.dumps(cfg), "torch": torch.__version__})
    print(f"wrote {target}: loss {step_losses[0]:.6f} -> {step_losses[-1]:.6f}")


if __name__ == "__main__":
    main()
