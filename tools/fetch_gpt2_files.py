#!/usr/bin/env python3
"""Fetches GPT-2's own tokenizer files (vocab.json, merges.txt) from PyPI: the
openai-whisper 20230117 source distribution ships them (whisper/assets/gpt2/). The archive
is checked against its PyPI sha256 before anything is extracted. The tokenizer parity test
reads them from DEST (default ~/.cache/mtrain/gpt2); `make deps` runs this when they are
missing.

  python3 tools/fetch_gpt2_files.py [DEST]
"""
import hashlib
import io
import pathlib
import sys
import tarfile
import urllib.request

URL = ("https://files.pythonhosted.org/packages/ea/b5/321fed5de3e0bf435f60e69be7871cb6544613"
       "fab2f720f92673edff6be2/openai-whisper-20230117.tar.gz")
SHA256 = "54d835d80d253363bb942225a94233ef1ca4029c6cc878dc4ce86fa422ba32e7"
MEMBERS = {"openai-whisper-20230117/whisper/assets/gpt2/vocab.json": "vocab.json",
           "openai-whisper-20230117/whisper/assets/gpt2/merges.txt": "merges.txt"}


def main():
    dest = pathlib.Path(sys.argv[1] if len(sys.argv) > 1
                        else pathlib.Path.home() / ".cache/mtrain/gpt2")
    if all((dest / name).exists() for name in MEMBERS.values()):
        return 0
    data = urllib.request.urlopen(URL, timeout=120).read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        print(f"fetch_gpt2_files: {URL}: sha256 {digest}, expected {SHA256}", file=sys.stderr)
        return 1
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member, name in MEMBERS.items():
            (dest / name).write_bytes(archive.extractfile(member).read())
    print(f"fetch_gpt2_files: GPT-2's vocab.json and merges.txt in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
