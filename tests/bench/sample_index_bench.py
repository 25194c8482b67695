#!/usr/bin/env python3
"""The Megatron-style sample index (data/document_samples.h) beside Megatron-Core's
GPTDataset on the same indexed dataset.

Writes a synthetic MMIDIDX dataset (D documents, lengths geometric around --mean-tokens,
uint16 ids), then times:
  ours       document_samples_bench: one epoch's index built in memory, built and written
             beside the dataset, loaded back; samples drawn per second;
  Megatron   GPTDataset through BlendedMegatronDatasetBuilder with a fresh path_to_cache:
             building its document, sample and shuffle indices for the same number of
             samples (one epoch), then loading them from its cache.
Prints one table; needs numpy and (for the Megatron column) megatron-core and torch.

  bazel build //data:document_samples_bench
  python3 tests/bench/sample_index_bench.py --documents 1000000 --mean-tokens 256
"""
import argparse
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_dataset(prefix, documents, mean_tokens, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(1.0 / mean_tokens, size=documents).astype(np.int32)
    tokens = int(lengths.sum())
    with open(prefix + ".bin", "wb") as out:
        left = tokens
        while left > 0:
            n = min(left, 1 << 26)
            out.write(rng.integers(0, 50257, size=n, dtype=np.uint16).tobytes())
            left -= n
    pointers = np.zeros(documents, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * 2, out=pointers[1:])
    with open(prefix + ".idx", "wb") as out:
        out.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        out.write(struct.pack("<Q", documents) + struct.pack("<Q", documents + 1))
        out.write(lengths.tobytes())
        out.write(pointers.tobytes())
        out.write(np.arange(documents + 1, dtype=np.int64).tobytes())
    return tokens


def megatron(prefix, seq_length, samples, cache):
    try:
        import torch  # noqa: F401  (megatron-core needs it)
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder)
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    except Exception as error:  # not installed: the column says why
        return {"error": f"megatron-core not importable: {error}"}

    class Tokenizer:  # what GPTDataset reads of one
        eod = 50256
        pad = 50257
        vocab_size = 50257
        unique_identifiers = {"class": "bench"}

    def build():
        config = GPTDatasetConfig(
            random_seed=1234, sequence_length=seq_length, blend=([prefix], None), split="1,0,0",
            path_to_cache=cache, tokenizer=Tokenizer(), reset_position_ids=False,
            reset_attention_mask=False, eod_mask_loss=False)
        start = time.perf_counter()
        datasets = BlendedMegatronDatasetBuilder(
            GPTDataset, [samples, None, None], lambda: True, config).build()
        return time.perf_counter() - start, datasets[0]

    try:
        built, dataset = build()
        loaded, _ = build()
        start = time.perf_counter()
        draws = min(samples, 20000)
        for k in range(draws):
            dataset[k]
        drawn = draws / (time.perf_counter() - start)
    except Exception as error:
        return {"error": f"GPTDataset failed: {error}"}
    return {"build_s": built, "load_s": loaded, "samples_per_s": drawn, "samples": len(dataset)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--mean-tokens", type=int, default=256)
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--bench", default="bazel-bin/data/document_samples_bench")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="sample-index-bench.")
    try:
        prefix = os.path.join(tmp, "synthetic")
        start = time.perf_counter()
        tokens = write_dataset(prefix, args.documents, args.mean_tokens)
        print(f"dataset: {args.documents:,} documents, {tokens:,} tokens "
              f"({tokens * 2 / 1e9:.2f} GB uint16), written in {time.perf_counter() - start:.1f} s")
        per_epoch = (tokens - 1) // args.seq_length
        out = subprocess.run([args.bench, f"--prefix={prefix}", f"--seq_length={args.seq_length}",
                              f"--samples={min(per_epoch, 100000)}"],
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out.strip().splitlines()[-1])
        theirs = megatron(prefix, args.seq_length, per_epoch, os.path.join(tmp, "megatron-cache"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\none epoch: {per_epoch:,} samples of {args.seq_length + 1} tokens")
    print(f"{'':<10} {'BUILD+WRITE s':>14} {'IN MEMORY s':>12} {'LOAD s':>8} {'SAMPLES/s':>11}")
    print(f"{'ours':<10} {ours['epoch_build_and_write_s']:>14.3f} "
          f"{ours['epoch_in_memory_s']:>12.3f} {ours['epoch_load_s']:>8.3f} "
          f"{ours['samples_per_s']:>11,.0f}")
    if "error" in theirs:
        print(f"{'Megatron':<10} {theirs['error']}")
    else:
        print(f"{'Megatron':<10} {theirs['build_s']:>14.3f} {'':>12} {theirs['load_s']:>8.3f} "
              f"{theirs['samples_per_s']:>11,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
