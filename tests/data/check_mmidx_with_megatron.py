#!/usr/bin/env python3
"""Cross-checks our MMIDIDX files against Megatron-LM's own implementation.

Not part of `make test` (it needs megatron-core and torch). Given a text file and the
prefix that //data:build_indexed_dataset wrote from it (or a JSONL file and
the prefix //data:preprocess wrote from it with GPT-2's files, every document
kept: --jsonl, --vocab-file, --merge-file, --append-eod; the expected ids then come from
HuggingFace `tokenizers`):

  1. reads the prefix with megatron.core.datasets.indexed_dataset.IndexedDataset and checks
     dtype, sequence and document counts, and that every sequence is the matching
     document's bytes (documents split by the rule in data/
     build_indexed_dataset.h);
  2. writes the same documents with Megatron's IndexedDatasetBuilder and checks that its
     .bin and .idx are byte-identical to ours (so our reader reads Megatron's files too);
  3. reads the prefix once more with a plain NumPy reader written from the format spec.

Without megatron-core only step 3 runs. Exits 0 when every check passes.

  bazel build //data:build_indexed_dataset
  bazel-bin/data/build_indexed_dataset --input=tests/data/shakespeare.txt \\
      --output_prefix=/tmp/corpus
  PYTHONPATH=... python3 tests/data/check_mmidx_with_megatron.py \\
      --text=tests/data/shakespeare.txt --prefix=/tmp/corpus
"""
import argparse
import codecs
import os
import struct
import sys
import tempfile

import numpy as np

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


def split_documents(text: bytes, separator: bytes) -> list:
    """The document rule of build_indexed_dataset.h: cut after each run of separators."""
    if not separator:
        return [text] if text else []
    documents, begin = [], 0
    while begin < len(text):
        found = text.find(separator, begin)
        if found < 0:
            documents.append(text[begin:])
            break
        end = found + len(separator)
        while text.startswith(separator, end):
            end += len(separator)
        documents.append(text[begin:end])
        begin = end
    return documents


def read_with_numpy(prefix: str):
    """A reader written from the format description alone."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
    version, code, sequences, documents = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1, f"version {version}"
    offset = 34
    lengths = np.frombuffer(idx, np.int32, sequences, offset)
    offset += lengths.nbytes
    pointers = np.frombuffer(idx, np.int64, sequences, offset)
    offset += pointers.nbytes
    document_indices = np.frombuffer(idx, np.int64, documents, offset)
    offset += document_indices.nbytes
    assert offset == len(idx), f"idx has {len(idx)} bytes, expected {offset}"
    dtype = DTYPES[code]
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    itemsize = np.dtype(dtype).itemsize
    sequences_out = [data[p // itemsize:p // itemsize + n] for p, n in zip(pointers, lengths)]
    return dtype, sequences_out, document_indices


def check(condition: bool, what: str, failures: list) -> None:
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def expected_from_jsonl(args):
    """preprocess's documents, tokenized by HuggingFace `tokenizers` with GPT-2's files
    (every line kept: run preprocess with --min-tokens=0 --exact-dedup=false
    --near-dedup=false), plus <|endoftext|> with --append-eod."""
    import json
    from tokenizers import ByteLevelBPETokenizer
    tokenizer = ByteLevelBPETokenizer(args.vocab_file, args.merge_file, add_prefix_space=False)
    eod = tokenizer.token_to_id("<|endoftext|>")
    expected = []
    with open(args.jsonl, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ids = tokenizer.encode(json.loads(line)[args.json_key]).ids
            expected.append(np.array(ids + ([eod] if args.append_eod else []), np.int64))
    return expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", help="the text file build_indexed_dataset read")
    parser.add_argument("--jsonl", help="or: the JSONL file preprocess read (with --vocab-file, "
                        "--merge-file)")
    parser.add_argument("--json-key", default="text")
    parser.add_argument("--vocab-file")
    parser.add_argument("--merge-file")
    parser.add_argument("--append-eod", action="store_true")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--separator", default="\\n\\n", help="as given to the tool")
    args = parser.parse_args()
    text = None
    if args.jsonl:
        expected = expected_from_jsonl(args)
        documents = expected
    else:
        with open(args.text, "rb") as f:
            text = f.read()
        separator = codecs.decode(args.separator, "unicode_escape").encode("latin-1")
        documents = split_documents(text, separator)
        expected = [np.frombuffer(d, np.uint8).astype(np.int64) for d in documents]
    failures = []

    dtype, sequences, document_indices = read_with_numpy(args.prefix)
    check(dtype == np.uint16, f"numpy: dtype uint16 (got {np.dtype(dtype).name})", failures)
    check(len(sequences) == len(documents),
          f"numpy: {len(documents)} sequences (got {len(sequences)})", failures)
    check(list(document_indices) == list(range(len(documents) + 1)),
          "numpy: document indices 0..N", failures)
    check(all(np.array_equal(s, e) for s, e in zip(sequences, expected)),
          "numpy: every sequence equals its document's tokens", failures)

    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
        import torch
    except ImportError as error:
        print(f"megatron-core not importable ({error}); only the NumPy check ran")
        return 1 if failures else 0

    dataset = IndexedDataset(args.prefix, mmap=True)
    check(dataset.index.dtype == np.uint16, f"megatron: dtype {dataset.index.dtype}", failures)
    check(len(dataset) == len(documents),
          f"megatron: len {len(dataset)} == {len(documents)} documents", failures)
    check(list(dataset.document_indices) == list(range(len(documents) + 1)),
          "megatron: document_indices 0..N", failures)
    check(all(np.array_equal(dataset[i].astype(np.int64), expected[i])
              for i in range(len(documents))),
          "megatron: dataset[i] equals document i's tokens for every i", failures)
    if text is not None:
        joined = np.concatenate([dataset[i] for i in range(len(dataset))]).astype(np.uint8).tobytes()
        check(joined == text, "megatron: sequences concatenated == the text file", failures)
    middle = len(documents) // 2
    part = dataset.get(middle, offset=1, length=5)
    check(np.array_equal(part.astype(np.int64), expected[middle][1:6]),
          "megatron: get(i, offset, length) agrees", failures)

    with tempfile.TemporaryDirectory() as tmp:
        theirs = os.path.join(tmp, "megatron")
        builder = IndexedDatasetBuilder(theirs + ".bin", dtype=np.uint16)
        for document in expected:
            builder.add_item(torch.from_numpy(document))
            builder.end_document()
        builder.finalize(theirs + ".idx")
        for suffix in (".bin", ".idx"):
            with open(theirs + suffix, "rb") as a, open(args.prefix + suffix, "rb") as b:
                check(a.read() == b.read(),
                      f"megatron: IndexedDatasetBuilder writes a byte-identical {suffix}",
                      failures)

    print(f"{len(failures)} failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
