#!/usr/bin/env python3
"""Generation speed (issue 20): `train --generate` with and without its key-value cache,
beside transformers' GPT2LMHeadModel.generate (use_cache True and False), on the same
random GPT-2 and machine, greedy, one sequence. Also checks that the tokens agree.

  bazel build //worker:train
  python3 tests/bench/generation_bench.py [--layers 6 --hidden 512 --heads 8 --new 128]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = GPT2Config(vocab_size=args.vocab, n_positions=args.context, n_embd=args.hidden,
                        n_layer=args.layers, n_head=args.heads, activation_function="gelu_new",
                        resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model = GPT2LMHeadModel(config).eval()
    prompt = "To be, or not to be, that is the question"
    ids = list(prompt.encode())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        spec = pathlib.Path(tmp, "job.json")
        spec.write_text(json.dumps({
            "model": {"num_layers": args.layers, "num_heads": args.heads,
                      "hidden_size": args.hidden, "seq_length": args.context,
                      "vocab_size": args.vocab},
            "train": {"init_from": tmp}, "device": "DEVICE_CPU"}))
        ours = {}
        for cache in (True, False):
            out = pathlib.Path(tmp, f"gen-{cache}.json")
            subprocess.run([str(ROOT / "bazel-bin/worker/train"), f"--spec={spec}",
                            f"--threads={args.threads}", f"--generate={prompt}",
                            f"--max_new_tokens={args.new}", f"--kv_cache={str(cache).lower()}",
                            f"--eval_output={out}"], check=True, capture_output=True)
            ours[cache] = json.loads(out.read_text())
            rows.append((f"train --generate, cache {'on' if cache else 'off'}",
                         ours[cache]["tokens_per_second"]))
        for cache in (True, False):
            with torch.no_grad():
                start = time.perf_counter()
                generated = model.generate(torch.tensor([ids]), max_new_tokens=args.new,
                                           min_new_tokens=args.new, do_sample=False,
                                           use_cache=cache, pad_token_id=0)
                seconds = time.perf_counter() - start
            theirs = generated[0, len(ids):].tolist()
            rows.append((f"transformers generate, use_cache={cache}", args.new / seconds))
            same = theirs == ours[True]["tokens"]
            print(f"transformers (use_cache={cache}) tokens equal ours: {same}")
    print(f"\nGPT-2 {args.layers} layers, hidden {args.hidden}, {args.heads} heads, vocabulary "
          f"{args.vocab}, fp32, {args.new} new tokens after {len(ids)}, {args.threads} threads")
    for name, rate in rows:
        print(f"  {name:<36} {rate:9.1f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
