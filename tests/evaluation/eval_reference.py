#!/usr/bin/env python3
"""Independent PyTorch reference for `train --evaluate` (issue 20): regenerates
eval_reference.json, which //tests:evaluation_test compares the engine against.

The model is the tiny GPT-2 of tests/parity/hf_export_model.h as ExportHuggingFace
writes it (byte-identical on every machine), run here from its HuggingFace tensors with
torch's own LayerNorm, GeLU (tanh), softmax attention and cross-entropy; the tasks are
written out again from their definitions, not from the engine's code:
  perplexity  Megatron-LM's windows (tasks/zeroshot_gpt): window w starts at w * overlap,
              holds seq_length + 1 tokens, and after the first scores only its last
              `overlap` targets; exp(mean loss), adjusted exp(sum / (words - 1));
  cloze       LAMBADA strict: the last word (after a space) must be the argmax at each of
              its tokens, its context being the text before it, stripped; cloze.jsonl is
              written here too: half its lines end in the word the model predicts;
  choice      llm.c's HellaSwag: lowest summed and lowest mean loss of " " + ending.
  generation  greedy, 200 tokens, from a random F16 GPT-2 with a 256-token context that
              this script writes to gen_model/ (the engine imports it exactly).
Tokens are bytes (the byte tokenizer; the model's vocabulary is 300).

  bazel build //tests/parity:write_hf_export
  python3 tests/evaluation/eval_reference.py    # needs torch and safetensors (PyPI)
"""
import json
import math
import random
import pathlib
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEQ, OVERLAP = 32, 8


def forward(w, cfg, tokens):
    """Logits [S, vocab] of one sequence of token ids."""
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D = C // H
    t = torch.tensor(tokens, dtype=torch.int64)
    S = len(tokens)
    x = w["transformer.wte.weight"][t] + w["transformer.wpe.weight"][:S]
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    for i in range(L):
        p = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        q, k, v = (a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(C, dim=-1)
        q, k, v = (m.view(S, H, D).transpose(0, 1) for m in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D)).masked_fill(~mask, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(0, 1).reshape(S, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        m = F.gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], 1e-5)
    return x @ w["transformer.wte.weight"].t()


def losses_and_argmax(w, cfg, tokens):
    logits = forward(w, cfg, tokens[:-1])
    targets = torch.tensor(tokens[1:], dtype=torch.int64)
    losses = F.cross_entropy(logits, targets, reduction="none")
    return losses.tolist(), (logits.argmax(dim=-1) == targets).tolist()


def encode(text):
    return list(text.encode("utf-8"))


def perplexity(w, cfg, text, losses_of=None):
    """`losses_of(tokens)` -> (losses, hits) scores a window (default: this file's GPT-2);
    tests/parity/llama/llama_reference.py passes transformers' Llama."""
    losses_of = losses_of or (lambda window: losses_and_argmax(w, cfg, window))
    tokens = encode(text)
    targets = len(tokens) - 1
    windows = max(math.ceil(max(targets - OVERLAP, 0) / OVERLAP) + 1, 1)
    total, count = 0.0, 0
    for idx in range(windows):
        window = tokens[idx * OVERLAP: idx * OVERLAP + SEQ + 1]
        losses, _ = losses_of(window)
        mask = [1] * len(losses) + [0] * (SEQ - len(losses))
        if idx != 0:
            mask[:-OVERLAP] = [0] * (SEQ - OVERLAP)
        for i, loss in enumerate(losses):
            if mask[i]:
                total += loss
                count += 1
    words = len(text.strip().split(" "))
    mean = total / count
    return {"examples": windows, "scored_tokens": count, "loss": mean,
            "perplexity": math.exp(min(20, mean)),
            "adjusted_perplexity": math.exp(min(20, total / (words - 1))), "words": words}


def ending(context, target):
    tokens = context + target
    first = len(context)
    cut = max(len(tokens) - (SEQ + 1), 0)
    tokens = tokens[cut:]
    scored = [i for i in range(max(first - cut, 1) - 1, len(tokens) - 1)]
    return tokens, scored


def cloze(w, cfg, lines):
    right, total, count = 0, 0.0, 0
    for line in lines:
        text = json.loads(line)["text"]
        last = text.split()[-1]
        context = text[: text.rfind(last)].strip()
        tokens, scored = ending(encode(context), encode(" " + last))
        losses, hits = losses_and_argmax(w, cfg, tokens)
        total += sum(losses[i] for i in scored)
        count += len(scored)
        right += all(hits[i] for i in scored)
    return {"examples": len(lines), "scored_tokens": count, "loss": total / count,
            "accuracy": right / len(lines)}


def choice(w, cfg, lines):
    right = right_norm = 0
    total, count = 0.0, 0
    for line in lines:
        example = json.loads(line)
        sums, means = [], []
        for end in example["endings"]:
            tokens, scored = ending(encode(example["ctx"]), encode(" " + end))
            losses, _ = losses_and_argmax(w, cfg, tokens)
            s = sum(losses[i] for i in scored)
            total += s
            count += len(scored)
            sums.append(s)
            means.append(s / len(scored))
        right += min(range(len(sums)), key=lambda k: sums[k]) == example["label"]
        right_norm += min(range(len(means)), key=lambda k: means[k]) == example["label"]
    return {"examples": len(lines), "scored_tokens": count, "loss": total / count,
            "accuracy": right / len(lines), "accuracy_norm": right_norm / len(lines)}


def predicts_space_then_word(w, cfg, context):
    """The word the model itself predicts after `context`: one printable ASCII byte after a
    predicted space, or None. The space is part of the target (" " + word, Megatron's),
    so it must be the argmax too."""
    tokens = encode(context)
    if int(forward(w, cfg, tokens)[-1].argmax()) != 32:
        return None
    t = int(forward(w, cfg, tokens + [32])[-1].argmax())
    return chr(t) if 33 <= t < 127 else None


def write_cloze(w, cfg):
    """cloze.jsonl: six lines of the shipped text as they are (the model, untrained, gets
    them wrong), then six of random letters whose last word is what the model predicts
    (right: every target token is the argmax), so strict accuracy is exercised both ways.
    Contexts stay under seq_length tokens, so each is scored in the window searched."""
    text = (ROOT / "tests/data/shakespeare.txt").read_text()
    paragraphs = [" ".join(p.split()) for p in text[100000:200000].split("\n\n")
                  if len(p.split()) >= 6][1:]
    lines = [json.dumps({"text": " ".join(p.split()[:14])}) for p in paragraphs[:6]]
    rng = random.Random(7)
    w32 = {k: v.float() for k, v in w.items()}
    while len(lines) < 12:
        context = "".join(rng.choice("abcdefghij klmnop") for _ in range(20)).strip()
        if " " not in context or predicts_space_then_word(w32, cfg, context) is None:
            continue
        word = predicts_space_then_word(w, cfg, context)  # confirmed in float64
        if word is not None:
            lines.append(json.dumps({"text": f"{context} {word}"}))
    (HERE / "cloze.jsonl").write_text("\n".join(lines) + "\n")


GEN_SEQ, GEN_PROMPT, GEN_NEW = 256, "To be, or not to be", 200


def write_generation_model():
    """gen_model/: a random GPT-2 (2 layers, 4 heads, hidden 64, context 256, vocabulary
    300) in F16 (import converts it exactly), for greedy generation of 200 tokens."""
    from safetensors.torch import save_file
    torch.manual_seed(20)
    C, V, L = 64, 300, 2
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (GEN_SEQ, C),
              "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                       p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                       p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                       p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                       p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                       p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    tensors = {}
    for name, shape in sorted(shapes.items()):
        t = torch.randn(shape) * 0.2
        if "ln_" in name and name.endswith("weight"):
            t = 1 + t
        tensors[name] = t.half().contiguous()
    out = HERE / "gen_model"
    out.mkdir(exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"model_type": "gpt2", "vocab_size": V, "n_positions": GEN_SEQ, "n_ctx": GEN_SEQ,
              "n_embd": C, "n_layer": L, "n_head": 4, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": None}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return {k: v.double() for k, v in tensors.items()}, config


def greedy(w, cfg, prompt, new):
    """Greedy continuation (no cache: the whole context each time), and the smallest gap
    between the best and the second-best logit on the way (how safe equality is)."""
    tokens = encode(prompt)
    out, margin = [], float("inf")
    for _ in range(new):
        logits = forward(w, cfg, tokens)[-1]
        top = torch.topk(logits, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        t = int(top.indices[0])
        out.append(t)
        tokens.append(t)
    return out, margin


def check_against_transformers(w, cfg, model_dir):
    """When transformers is installed: its GPT2LMHeadModel on the same files gives the
    logits of forward() here (to 1e-6), so the reference is transformers' numbers too."""
    try:
        from transformers import GPT2LMHeadModel
    except ImportError:
        print("transformers not installed: the cross-check is skipped")
        return
    model = GPT2LMHeadModel.from_pretrained(model_dir).double().eval()
    tokens = encode((HERE / "text.txt").read_text())[:SEQ]
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0]
    ours = forward(w, cfg, tokens)
    error = float((theirs - ours).abs().max() / ours.abs().max())
    assert error < 1e-6, f"transformers' logits differ from the reference's by {error}"
    print(f"transformers' logits equal the reference's (max relative difference {error:.1e})")


def main():
    writer = ROOT / "bazel-bin/tests/parity/write_hf_export"
    if not writer.exists():
        sys.exit(f"{writer} missing: run `bazel build //tests/parity:write_hf_export`")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(writer), f"--output_dir={tmp}"], check=True)
        w = {k: v.double() for k, v in load_file(f"{tmp}/model.safetensors").items()}
        cfg = json.loads(pathlib.Path(tmp, "config.json").read_text())
        check_against_transformers(w, cfg, tmp)
    if not (HERE / "cloze.jsonl").exists():  # slow (a search): kept once written
        write_cloze(w, cfg)
    lines = lambda name: [l for l in (HERE / name).read_text().splitlines() if l.strip()]
    reference = {
        "seq_length": SEQ, "overlapping_eval": OVERLAP,
        "perplexity": perplexity(w, cfg, (HERE / "text.txt").read_text()),
        "cloze": cloze(w, cfg, lines("cloze.jsonl")),
        "choice": choice(w, cfg, lines("choice.jsonl")),
    }
    gen_w, gen_cfg = write_generation_model()
    check_against_transformers(gen_w, gen_cfg, str(HERE / "gen_model"))
    tokens, margin = greedy(gen_w, gen_cfg, GEN_PROMPT, GEN_NEW)
    reference["generation"] = {"prompt": GEN_PROMPT, "max_new_tokens": GEN_NEW,
                               "tokens": tokens, "smallest_top2_gap": margin}
    (HERE / "eval_reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(json.dumps(reference, indent=1))


if __name__ == "__main__":
    main()
