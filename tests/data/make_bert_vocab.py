#!/usr/bin/env python3
"""Writes tests/data/bert_vocab.txt: an uncased BERT WordPiece vocabulary of 2,048 entries
trained by HuggingFace `tokenizers` on tests/data/shakespeare.txt, with BERT's special tokens
first ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4). The shipped BERT job
(deploy/local/bert_job.json) and the BERT tests tokenize the corpus with it. `tokenizers`
breaks ties between equally frequent pairs in no fixed order, so a rerun may give another
(equally valid) file: the shipped one is the reference, committed.

    python3 tests/data/make_bert_vocab.py
"""
import pathlib
import tempfile

from tokenizers import BertWordPieceTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    wp = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                lowercase=True)
    wp.train([str(ROOT / "tests/data/shakespeare.txt")], vocab_size=2048, min_frequency=2,
             special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        written = wp.save_model(tmp, "bert")[0]
        vocab = pathlib.Path(written).read_text(encoding="utf-8")
    (ROOT / "tests/data/bert_vocab.txt").write_text(vocab, encoding="utf-8")
    print(f"tests/data/bert_vocab.txt: {len(vocab.splitlines())} entries")


if __name__ == "__main__":
    main()
