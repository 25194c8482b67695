#!/usr/bin/env python3
"""The Megatron-LM paper's BERT finding, in small (issue 35): the original BERT's LayerNorm
after each residual add (model.layernorm_placement LAYERNORM_PLACEMENT_POST) against
Megatron's rearrangement before each sub-layer (LAYERNORM_PLACEMENT_PRE), at growing depth,
on the same data, steps, batch and learning rate. The paper saw the original degrade beyond
BERT-Large (336M parameters) while the rearranged one kept improving with size; here the
models are tiny and the runs short, so this shows what happens at this scale, whichever way
it goes.

Each run: one `train` rank (CPU), BERT of DEPTH layers at hidden 64 (4 heads, FFN 256),
seq 64, the shipped corpus made into a sentence dataset with the shipped WordPiece
vocabulary (2,048 entries), global batch 32, AdamW lr 1e-3 with 50 warm-up steps and
linear decay, dropout 0.1, seed 1234; the validation masked-LM loss and accuracy at the end
(8 batches of the held-out 5%). It prints a table and writes the plot of the final
validation masked-LM loss against depth for both placements.

    bazel build //worker:train
    pip install matplotlib
    python3 tests/bench/bert_layernorm_scaling.py [--depths 2,6,12,24] [--steps 400] \\
        [--out docs/bert_layernorm_scaling.png] [--from_results RESULTS.json]

The last JSON line it prints is the results; --from_results plots such a file again.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLACEMENTS = ("PRE", "POST")


def run(placement, depth, steps, work, threads, train):
    spec = {
        "name": f"bert-{placement.lower()}-{depth}",
        "model": {"family": "MODEL_FAMILY_BERT", "num_layers": depth, "num_heads": 4,
                  "hidden_size": 64, "seq_length": 64, "vocab_size": 2048,
                  "layernorm_placement": f"LAYERNORM_PLACEMENT_{placement}"},
        "parallel": {"micro_batch_size": 8, "global_batch_size": 32},
        "optimizer": {"lr": 1e-3, "warmup_steps": 50},
        "data": {"tokenizer": "TOKENIZER_WORDPIECE",
                 "vocab_file": os.path.join(ROOT, "tests/data/bert_vocab.txt"),
                 "path": os.path.join(ROOT, "tests/data/shakespeare.txt"), "split": "95,5,0"},
        "train": {"steps": steps, "dropout": 0.1, "seed": 1234, "eval_interval": steps,
                  "eval_iters": 8},
        "device": "DEVICE_CPU",
    }
    tag = f"{placement.lower()}-{depth}"
    spec_path = os.path.join(work, f"{tag}.json")
    metrics = os.path.join(work, f"{tag}.jsonl")
    with open(spec_path, "w") as out:
        json.dump(spec, out)
    start = time.time()
    done = subprocess.run([train, f"--spec={spec_path}",
                           f"--metrics_jsonl={metrics}", f"--threads={threads}"],
                          capture_output=True, text=True)
    seconds = time.time() - start
    if done.returncode != 0:
        # A diverged run (non-finite gradient norm) is a result too.
        return {"placement": placement, "depth": depth, "diverged": True, "seconds": seconds,
                "log": done.stderr[-400:]}
    rows = [json.loads(line) for line in open(metrics)]
    last = rows[-1]
    return {"placement": placement, "depth": depth, "diverged": False, "seconds": seconds,
            "train_loss": last["loss"], "mlm_loss": last["validation_mlm_loss"],
            "mlm_accuracy": last["validation_mlm_accuracy"],
            "sop_accuracy": last["validation_sop_accuracy"]}


def plot(results, depths, steps, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(6, 4))
    for placement, style in zip(PLACEMENTS, ("o-", "s--")):
        points = [(r["depth"], r["mlm_loss"]) for r in results
                  if r["placement"] == placement and not r["diverged"]]
        label = ("pre (Megatron's rearranged LayerNorm)" if placement == "PRE"
                 else "post (the original BERT)")
        axis.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
    axis.set_xscale("log")
    axis.minorticks_off()
    axis.set_xticks(depths)
    axis.set_xticklabels([str(d) for d in depths])
    axis.set_xlabel("layers (hidden 64, 4 heads)")
    axis.set_ylabel("validation masked-LM loss")
    axis.set_title(f"BERT: LayerNorm placement against depth\n"
                   f"({steps} steps, batch 32, seq 64, the shipped corpus)", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", default="2,6,12,24")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--train", default=os.path.join(ROOT, "bazel-bin/worker/train"),
                        help="the train binary")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs/bert_layernorm_scaling.png"))
    parser.add_argument("--from_results", default="",
                        help="plot the JSON list a run printed instead of training")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if args.from_results:
        with open(args.from_results) as saved:
            plot(json.load(saved), depths, args.steps, args.out)
        print(f"wrote {args.out}")
        return
    results = []
    with tempfile.TemporaryDirectory() as work:
        for depth in depths:
            for placement in PLACEMENTS:
                result = run(placement, depth, args.steps, work, args.threads, args.train)
                results.append(result)
                if result["diverged"]:
                    print(f"{placement:<5} {depth:>3} layers: diverged after {result['seconds']:.0f} s:"
                          f" {result['log']}", flush=True)
                else:
                    print(f"{placement:<5} {depth:>3} layers: validation masked-LM loss "
                          f"{result['mlm_loss']:.4f}, accuracy {100 * result['mlm_accuracy']:.1f}%,"
                          f" sentence order {100 * result['sop_accuracy']:.1f}%, train loss "
                          f"{result['train_loss']:.4f} ({result['seconds']:.0f} s)", flush=True)
    print(json.dumps(results))
    plot(results, depths, args.steps, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
