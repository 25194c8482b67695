#!/usr/bin/env python3
"""transformers' LlamaForCausalLM as the reference for the engine's Llama-style layers
(issue 33): writes the two models of //tests:llama_hf_parity_test and what transformers
computes with them, llama_reference.json.

  gqa/                 4 query heads reading 2 key-value heads, no biases, untied output
                       layer, rope_theta 10000, rms_norm_eps 1e-6 (Llama 2/3's shape);
  mha_tied_sharded/    4 key-value heads, attention biases (q, k, v, o), the output layer
                       tied to the embedding, rope_theta 500, rms_norm_eps 1e-5, saved in
                       shards (model.safetensors.index.json).
Both: 2 layers, hidden 64 (head size 16), intermediate 96, vocabulary 300 (byte tokens),
32 positions; transformers' initialisation, then every weight redrawn at a larger scale so
that every path moves the logits. For each, in float64 with eager attention:
  perplexity   of tests/evaluation/text.txt by the engine's `--evaluate=perplexity` windows
               (seq 32, overlap 8; tests/evaluation/eval_reference.py's definition), the
               loss of the initial weights that step 1 reports;
  generation   26 greedy tokens after a prompt, with the smallest gap between the top two
               logits on the way (a wide gap: the engine's float32 cannot flip a choice).

  python3 tests/parity/llama/llama_reference.py   # needs torch, transformers, safetensors
"""
import json
import pathlib
import sys

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
sys.path.insert(0, str(ROOT / "tests/evaluation"))
import eval_reference  # noqa: E402  (the perplexity windows, written once)

PROMPT = "King.\n"
NEW_TOKENS = 26  # the prompt and these fill the 32 positions but one

MODELS = {
    "gqa": dict(num_key_value_heads=2, attention_bias=False, tie_word_embeddings=False,
                rope_theta=10000.0, rms_norm_eps=1e-6, shard=None),
    "mha_tied_sharded": dict(num_key_value_heads=4, attention_bias=True,
                             tie_word_embeddings=True, rope_theta=500.0, rms_norm_eps=1e-5,
                             shard="40KB"),
}


def make_model(name, settings):
    torch.manual_seed(1234 + len(name))
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=settings["num_key_value_heads"],
                         max_position_embeddings=32, rms_norm_eps=settings["rms_norm_eps"],
                         rope_parameters={"rope_type": "default",
                                          "rope_theta": settings["rope_theta"]},
                         attention_bias=settings["attention_bias"], mlp_bias=False,
                         tie_word_embeddings=settings["tie_word_embeddings"],
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith("layernorm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    out = HERE / name
    kwargs = {"safe_serialization": True}
    if settings["shard"]:
        kwargs["max_shard_size"] = settings["shard"]
    model.save_pretrained(out, **kwargs)
    (out / "generation_config.json").unlink(missing_ok=True)
    return LlamaForCausalLM.from_pretrained(out, attn_implementation="eager").double().eval()


def losses_of(model):
    def run(tokens):
        with torch.no_grad():
            logits = model(torch.tensor([tokens[:-1]])).logits[0]
        targets = torch.tensor(tokens[1:], dtype=torch.int64)
        losses = F.cross_entropy(logits, targets, reduction="none")
        return losses.tolist(), (logits.argmax(dim=-1) == targets).tolist()
    return run


def greedy(model, prompt, new):
    tokens = eval_reference.encode(prompt)
    gap = float("inf")
    with torch.no_grad():
        for _ in range(new):
            logits = model(torch.tensor([tokens])).logits[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            tokens.append(int(logits.argmax()))
    return tokens[len(eval_reference.encode(prompt)):], gap


def main():
    text = (ROOT / "tests/evaluation/text.txt").read_text()
    reference = {"seq_length": eval_reference.SEQ, "overlapping_eval": eval_reference.OVERLAP,
                 "prompt": PROMPT, "max_new_tokens": NEW_TOKENS}
    for name, settings in MODELS.items():
        model = make_model(name, settings)
        result = eval_reference.perplexity(None, None, text, losses_of(model))
        tokens, gap = greedy(model, PROMPT, NEW_TOKENS)
        reference[name] = {"perplexity": result, "generation": tokens, "smallest_top2_gap": gap}
    (HERE / "llama_reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(json.dumps(reference, indent=1))


if __name__ == "__main__":
    main()
