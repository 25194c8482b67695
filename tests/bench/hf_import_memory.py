#!/usr/bin/env python3
"""Peak memory of importing a HuggingFace GPT-2 124M (issue 20): writes the model's tensors
as transformers names them (random fp32 values, about 475 MiB with the tied head omitted)
and runs //checkpoint:hf_import_bench: `whole` (the file read into memory, then converted),
`streaming` (ImportHuggingFace: one tensor's bytes at a time), a first pipeline stage of
4 (its tensors only) and a tensor-parallel rank of 4 (1/4 of each tensor kept as it is
read).

  bazel build //checkpoint:hf_import_bench && python3 tests/bench/hf_import_memory.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

L, C, V, P = 12, 768, 50257, 1024


def tensors():
    yield "transformer.wte.weight", (V, C)
    yield "transformer.wpe.weight", (P, C)
    for i in range(L):
        p = f"transformer.h.{i}."
        yield p + "ln_1.weight", (C,)
        yield p + "ln_1.bias", (C,)
        yield p + "attn.c_attn.weight", (C, 3 * C)
        yield p + "attn.c_attn.bias", (3 * C,)
        yield p + "attn.c_proj.weight", (C, C)
        yield p + "attn.c_proj.bias", (C,)
        yield p + "ln_2.weight", (C,)
        yield p + "ln_2.bias", (C,)
        yield p + "mlp.c_fc.weight", (C, 4 * C)
        yield p + "mlp.c_fc.bias", (4 * C,)
        yield p + "mlp.c_proj.weight", (4 * C, C)
        yield p + "mlp.c_proj.bias", (C,)
    yield "transformer.ln_f.weight", (C,)
    yield "transformer.ln_f.bias", (C,)


def write(path):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    shapes = list(tensors())
    for name, shape in shapes:
        size = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    rng = np.random.default_rng(0)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for name, shape in shapes:
            out.write(rng.standard_normal(shape, dtype=np.float32).tobytes())


def main():
    bench = os.path.join(os.path.dirname(__file__), "../../bazel-bin/checkpoint/hf_import_bench")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.safetensors")
        write(path)
        size = os.path.getsize(path) / (1 << 20)
        print(f"GPT-2 124M, fp32, {size:.0f} MiB")
        for mode, flags in (("whole", []), ("streaming", []), ("stage 1/4", ["--stage_layers=3"]),
                            ("tensor 1/4", ["--tensor=4"])):
            out = subprocess.run([bench, f"--path={path}",
                                  f"--mode={'whole' if mode == 'whole' else 'streaming'}"] + flags,
                                 check=True, capture_output=True, text=True).stdout
            row = json.loads(out)
            print(f"{mode:<10} peak RSS {row['peak_rss_mib']:7.0f} MiB  (result {row['result_mib']:.0f} "
                  f"MiB of float parameters; {row['peak_rss_mib'] - row['result_mib']:.0f} MiB above it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
