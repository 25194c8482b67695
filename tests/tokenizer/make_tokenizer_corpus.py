#!/usr/bin/env python3
"""Writes the tokenizer test corpus: the shipped Shakespeare text followed by about 300 KB
of hard cases drawn at random (seeded, so the file is the same everywhere): many scripts,
emoji (with skin tones, ZWJ sequences and flags), runs of spaces, tabs, newlines, CRLF,
no-break and ideographic spaces, digits and numerals of several scripts, contractions in
both cases, code-like punctuation, <|endoftext|> separators, and invalid UTF-8 (stray
continuation bytes, truncated sequences, overlong forms, surrogates, bytes above F4).

  python3 tests/tokenizer/make_tokenizer_corpus.py OUT [--hard-bytes 300000]
"""
import argparse
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]

PHRASES = [
    # Written for this test; each a short line in its language.
    "The quick brown fox doesn't stop; it's already past the river.",
    "Le renard brun ne s'arrête pas : il a déjà traversé la rivière à l'aube.",
    "Der schnelle Fuchs hält nicht an, er überquert die Straße – schön, oder?",
    "El zorro marrón no se detiene; ¿ya cruzó el río? ¡Sí!",
    "Быстрая лиса не останавливается: она уже перешла реку.",
    "Η γρήγορη αλεπού δεν σταματά· έχει ήδη περάσει το ποτάμι.",
    "الثعلب السريع لا يتوقف، لقد عبر النهر بالفعل.",
    "השועל המהיר לא עוצר, הוא כבר חצה את הנהר.",
    "तेज़ लोमड़ी नहीं रुकती, वह पहले ही नदी पार कर चुकी है।",
    "敏捷的狐狸不会停下，它已经过了河。",
    "素早い狐は止まらない。もう川を渡った。カタカナもひらがなも。",
    "빠른 여우는 멈추지 않는다. 이미 강을 건넜다.",
    "สุนัขจิ้งจอกที่ว่องไวไม่หยุด มันข้ามแม่น้ำไปแล้ว",
    "Con cáo nhanh nhẹn không dừng lại, nó đã qua sông rồi.",
    "Tilki durmuyor; çoktan nehri geçti, öyle değil mi?",
    "Szybki lis się nie zatrzymuje — już przeszedł rzekę.",
    "I'm sure you're right, but we'll see what they've done; she'd know. IT'S HERE. 'Tis so.",
    "''Quoted'' and \"double\" and `backticks` and 'single' quotes' edges'",
    "def f(x): return {'a': [1, 2, 3], \"b\": x ** 2 // 3} # comment",
    "if (a != b && c <= d) { printf(\"%d\\n\", e->f[0]); }",
    "Prices: $1,234.56 / €99,90 / ¥10000 / 3.14159e-10 / 0x1F600 / 2026-11-25T21:39:55Z",
    "Call +1 (555) 012-3456 or 555.012.3457; room 42B, floor 7½, chapter Ⅳ, ٣٤٥ and ३४५.",
    "Emoji: 😀😃😄 👍🏽 👩‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ☕ 🍕!! ✨🎉✨",
    "Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ ≈ ∫ f(t) dt → ∞ ≠ ∅.",
    "Combining: e\u0301 a\u0308 n\u0303 and zero\u200bwidth and soft\u00adhyphen.",
    "Tabs\tand\t\tmore\t\t\ttabs, trailing spaces   ",
]

SPACES = [" ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0",
          "\u3000", "\u2003", " \t \n"]

INVALID = [b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf",
           b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xfe\xfe",
           b"\xf8\x88\x80\x80\x80"]


def hard_cases(size, seed):
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        kind = rng.random()
        if kind < 0.55:
            out += rng.choice(PHRASES).encode()
        elif kind < 0.75:
            out += rng.choice(SPACES).encode()
        elif kind < 0.85:
            out += str(rng.randrange(10 ** rng.randrange(1, 15))).encode()
        elif kind < 0.93:
            out += rng.choice(INVALID)
        elif kind < 0.97:
            out += "<|endoftext|>".encode()
        else:
            # A long run of one character: the BPE of a long piece.
            out += (rng.choice("a-=~ 😀") * rng.randrange(20, 200)).encode()
        out += rng.choice([b" ", b"", b"\n"])
    return bytes(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--hard-bytes", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    shakespeare = (ROOT / "tests/data/shakespeare.txt").read_bytes()
    pathlib.Path(args.out).write_bytes(shakespeare + hard_cases(args.hard_bytes, args.seed))


if __name__ == "__main__":
    main()
