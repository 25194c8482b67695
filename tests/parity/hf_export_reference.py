#!/usr/bin/env python3
"""HuggingFace check of the GPT-2 export: regenerates hf_gpt2_export_reference.safetensors.

The engine exports the tiny model of tests/parity/hf_export_model.h with
ExportHuggingFace (bazel-bin/tests/parity/write_hf_export, which also writes the
engine's fp32 logits for fixed tokens). This script loads that directory with
transformers' own GPT2LMHeadModel.from_pretrained (fp32, eval: no dropout), checks that
every weight was used and none is missing, runs the same tokens, and fails if the logits
differ from the engine's by more than 1e-5 relative (max |a - b| / max |b|), with the
default attention implementation and with "eager". It also recomputes the CRC-32C of the
model.safetensors it loaded and checks it against the tool's. It records:
  logits     [batch * seq, vocab] transformers' logits (F32)
  tokens     [batch, seq] the input (I32)
  metadata   model_safetensors_crc32c (decimal, of the file transformers loaded),
             config_json (its text), the errors measured, torch/transformers versions
The C++ test //tests/parity:hf_export_test (no torch needed) re-runs the export in-process
and checks the file is byte-identical (CRC-32C), config.json identical, and the engine's
logits still match these.

Each variant of the tool (--variant: gpt2, and wide_ffn with model.ffn_hidden_size 3 h and
model.norm_epsilon 1e-3, i.e. HF n_inner and layer_norm_epsilon) has its own reference,
hf_gpt2_export_reference<_variant>.safetensors; the script regenerates both.

  bazel build //tests/parity:write_hf_export
  python3 tests/parity/hf_export_reference.py   # needs torch, transformers, safetensors
                                                # from PyPI
"""
import pathlib
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import GPT2LMHeadModel

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TOLERANCE = 1e-5


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected 0x82F63B78), as checkpoint/crc32c.h."""
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def load_model(path, **kwargs):
    """fp32 GPT2LMHeadModel in eval mode; fails on missing or unused weights."""
    dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model, info = GPT2LMHeadModel.from_pretrained(
        path, output_loading_info=True, **{dtype_arg: torch.float32}, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"from_pretrained({path}) did not load the export cleanly: {problems}")
    return model.eval()


def errors(ours, theirs):
    """(max |a - b|, max |a - b| / max |b|)."""
    diff = (ours.double() - theirs.double()).abs().max().item()
    return diff, diff / theirs.double().abs().max().item()


VARIANTS = {"gpt2": "", "wide_ffn": "_wide_ffn"}


def main():
    assert crc32c(b"123456789") == 0xE3069283
    tool = ROOT / "bazel-bin/tests/parity/write_hf_export"
    if not tool.exists():
        sys.exit(f"{tool} missing: run `bazel build //tests/parity:write_hf_export`")
    for variant, suffix in VARIANTS.items():
        check_variant(tool, variant, HERE / f"hf_gpt2_export_reference{suffix}.safetensors")


def check_variant(tool, variant, target):
    print(f"variant {variant}:")
    with tempfile.TemporaryDirectory() as tmp:
        export = pathlib.Path(tmp) / "export"
        subprocess.run([str(tool), f"--output_dir={export}", f"--variant={variant}"], check=True)
        engine = load_file(str(export / "engine.safetensors"))
        with safe_open(str(export / "engine.safetensors"), "pt") as f:
            meta = f.metadata()
        crc = crc32c((export / "model.safetensors").read_bytes())
        if crc != int(meta["model_safetensors_crc32c"]):
            sys.exit(f"CRC-32C of model.safetensors is {crc}, the tool says "
                     f"{meta['model_safetensors_crc32c']}")
        config_json = (export / "config.json").read_text()
        assert config_json == meta["config_json"]

        tokens = engine["tokens"].long()
        ours = engine["logits"]
        results = {}
        with torch.no_grad():
            for impl in (None, "eager"):
                kwargs = {"attn_implementation": impl} if impl else {}
                model = load_model(str(export), **kwargs)
                logits = model(tokens).logits.reshape(ours.shape)
                name = impl or model.config._attn_implementation
                results[name] = (logits.contiguous(), *errors(ours, logits))
    default_name = next(iter(results))
    worst = 0.0
    for name, (_, abs_err, rel_err) in results.items():
        print(f"{name:>6}: max |engine - transformers| = {abs_err:.3e}, relative {rel_err:.3e}")
        worst = max(worst, rel_err)
    if worst > TOLERANCE:
        sys.exit(f"FAIL: relative logits error {worst:.3e} > {TOLERANCE}")

    logits, abs_err, rel_err = results[default_name]
    save_file({"logits": logits, "tokens": engine["tokens"].contiguous()}, str(target), metadata={
        "model_safetensors_crc32c": str(crc),
        "config_json": config_json,
        "attn_implementation": default_name,
        "max_abs_error": f"{abs_err:.3e}",
        "max_rel_error": f"{rel_err:.3e}",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    })
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
