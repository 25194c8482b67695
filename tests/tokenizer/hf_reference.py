#!/usr/bin/env python3
"""The reference side of the tokenizer parity test: HuggingFace `tokenizers` trains a
byte-level BPE (8192 ids, <|endoftext|> special) on the shipped Shakespeare text, saves it as
tokenizer.json and as vocab.json + merges.txt, and encodes the test corpus (read as
bytes.decode("utf-8", errors="replace"), as text from a file reaches `tokenizers` in
Python); with --gpt2-dir it also encodes the corpus with GPT-2's own files. It also trains
a tokenizer built as Meta's Llama 3 tokenizer.json is (a Split by Llama 3's pattern, then
ByteLevel without its own, ignore_merges; <|begin_of_text|> and <|end_of_text|>) and
saves and encodes it the same way (llama3_tokenizer.json, llama3_ids.bin); and two
SentencePiece-style BPEs with byte fallback (an alphabet cut to 80 characters, so the
corpus's other scripts and emoji fall back to <0xNN> tokens): Llama 2's kind (normalizer
Prepend "▁" + Replace " " -> "▁", no pre-tokenizer; llama2_*) and Mistral's later kind
(Metaspace, prepend_scheme first, split; metaspace_*); and BERT's WordPiece, uncased and
cased (wordpiece_*, wordpiece_cased_*: tokenizer.json, vocab.txt, ids). Ids are written
as little-endian int32; a JSON summary (counts, single-thread MB/s of each encode) goes to
stdout.

  python3 tests/tokenizer/hf_reference.py --corpus CORPUS --out DIR [--gpt2-dir DIR]
"""
import argparse
import array
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
import tokenizers  # noqa: E402
from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer  # noqa: E402
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers, trainers)

# Llama 3's pre-tokenizer pattern, as its tokenizer.json spells it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def encode(tokenizer, text, out_path):
    start = time.perf_counter()
    ids = tokenizer.encode(text).ids
    seconds = time.perf_counter() - start
    array.array("i", ids).tofile(open(out_path, "wb"))
    return len(ids), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpt2-dir", default="")
    parser.add_argument("--vocab-size", type=int, default=8192)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = pathlib.Path(args.corpus).read_bytes()
    text = raw.decode("utf-8", errors="replace")
    summary = {"tokenizers": tokenizers.__version__, "corpus_bytes": len(raw)}

    trained = ByteLevelBPETokenizer(add_prefix_space=False)
    trained.train([str(ROOT / "tests/data/shakespeare.txt")], vocab_size=args.vocab_size,
                  min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    trained.save(str(out / "tokenizer.json"))
    trained.save_model(str(out))  # vocab.json, merges.txt
    n, seconds = encode(trained, text, out / "trained_ids.bin")
    summary["trained"] = {"tokens": n, "seconds": seconds, "mb_per_s": len(raw) / seconds / 1e6}

    llama3 = Tokenizer(models.BPE(ignore_merges=True))
    llama3.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    llama3.decoder = decoders.ByteLevel()
    llama3.train([str(ROOT / "tests/data/shakespeare.txt")],
                 trainers.BpeTrainer(vocab_size=args.vocab_size, min_frequency=2,
                                     special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False))
    llama3.save(str(out / "llama3_tokenizer.json"))
    n, seconds = encode(llama3, text, out / "llama3_ids.bin")
    summary["llama3"] = {"tokens": n, "seconds": seconds, "mb_per_s": len(raw) / seconds / 1e6}

    for name, metaspace in (("llama2", False), ("metaspace", True)):
        sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        if metaspace:
            sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                        prepend_scheme="first", split=True)
            sp.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first",
                                            split=True)
        else:
            sp.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                  normalizers.Replace(" ", "\u2581")])
            sp.decoder = decoders.Sequence([decoders.Replace("\u2581", " "),
                                            decoders.ByteFallback(), decoders.Fuse(),
                                            decoders.Strip(" ", 1, 0)])
        sp.train([str(ROOT / "tests/data/shakespeare.txt")],
                 trainers.BpeTrainer(vocab_size=4000, min_frequency=2, limit_alphabet=80,
                                     special_tokens=["<unk>", "<s>", "</s>"],
                                     show_progress=False))
        # The 256 byte tokens, as Llama 2's vocabulary has them (ordinary entries).
        spec = json.loads(sp.to_str())
        vocab = spec["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", max(vocab.values()) + 1)
        sp = Tokenizer.from_str(json.dumps(spec))
        sp.save(str(out / f"{name}_tokenizer.json"))
        n, seconds = encode(sp, text, out / f"{name}_ids.bin")
        summary[name] = {"tokens": n, "seconds": seconds, "mb_per_s": len(raw) / seconds / 1e6}

    # BERT's WordPiece (issue 35): uncased (lower case, accents stripped) and cased, trained
    # on the shipped text with BERT's special tokens; the corpus encoded without [CLS]/[SEP],
    # and the uncased ids of the corpus's first 2000 tokens decoded back.
    for name, lowercase in (("wordpiece", True), ("wordpiece_cased", False)):
        wp = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True,
                                    strip_accents=None, lowercase=lowercase)
        wp.train([str(ROOT / "tests/data/shakespeare.txt")], vocab_size=4000, min_frequency=2,
                 special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                 show_progress=False)
        wp.save(str(out / f"{name}_tokenizer.json"))
        wp.save_model(str(out), name)  # NAME-vocab.txt
        start = time.perf_counter()
        ids = wp.encode(text, add_special_tokens=False).ids
        seconds = time.perf_counter() - start
        array.array("i", ids).tofile(open(out / f"{name}_ids.bin", "wb"))
        summary[name] = {"tokens": len(ids), "seconds": seconds,
                         "mb_per_s": len(raw) / seconds / 1e6}
        if lowercase:
            (out / "wordpiece_decoded.txt").write_text(
                wp.decode(ids[:2000], skip_special_tokens=False), encoding="utf-8")

    if args.gpt2_dir:
        gpt2 = ByteLevelBPETokenizer(str(pathlib.Path(args.gpt2_dir, "vocab.json")),
                                     str(pathlib.Path(args.gpt2_dir, "merges.txt")),
                                     add_prefix_space=False)
        n, seconds = encode(gpt2, text, out / "gpt2_ids.bin")
        summary["gpt2"] = {"tokens": n, "seconds": seconds, "mb_per_s": len(raw) / seconds / 1e6}
    json.dump(summary, sys.stdout)
    print()


if __name__ == "__main__":
    main()
