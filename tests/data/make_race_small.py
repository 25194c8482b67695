#!/usr/bin/env python3
"""Writes the small RACE-format files the tests fine-tune and evaluate BERT on.

RACE itself (Lai et al. 2017) is English exams for Chinese students, distributed under its
own terms: these files are made here from templates instead, in RACE's fields (article,
questions, options, answers A-D; one passage a line). Every word is in the shipped
WordPiece vocabulary (tests/data/bert_vocab.txt). Each passage tells who gave what to whom,
where they went and what they had; each question's right option appears in the passage and
its three distractors do not, so a small BERT can learn the task in a few hundred steps.

    python3 tests/data/make_race_small.py  # writes race_small.jsonl and race_small_dev.jsonl

Deterministic: the same script writes the same bytes (random.Random with fixed seeds).
"""
import json
import os
import random

NAMES = ["romeo", "juliet", "hamlet", "lear", "tom", "brutus", "caesar", "antony", "paris",
         "the duke", "the prince", "the king", "the queen", "his father", "her mother",
         "my brother", "your sister", "the lady", "the lord", "a friend"]
THINGS = ["a sword", "a ring", "a crown", "a letter", "a cup", "a horse", "a dog", "a cat",
          "a fish", "some wine", "some gold", "some money", "a book", "a flower", "a bed",
          "a door", "a key", "a gown", "a glove", "a jewel"]
PLACES = ["the church", "the castle", "the field", "the house", "the court", "the city",
          "the sea", "the town", "the wood", "the palace", "the garden", "the camp",
          "the gate", "the street", "the tavern", "the abbey"]
COLOURS = ["red", "green", "white", "black", "gold", "fair", "old", "young", "little",
           "great", "poor", "good"]
TIMES = ["in the morning", "at night", "that day", "at noon", "in the evening", "at dawn"]


def other(rng, pool, used, count):
    """`count` members of pool not in `used`."""
    return rng.sample([p for p in pool if p not in used], count)


def question(rng, text, right, wrong):
    options = [right] + wrong
    rng.shuffle(options)
    return text, options, "ABCD"[options.index(right)]


def passage(rng, index):
    a, b = rng.sample(NAMES, 2)
    thing, place, colour, time = (rng.choice(THINGS), rng.choice(PLACES), rng.choice(COLOURS),
                                  rng.choice(TIMES))
    pet = rng.choice(["horse", "dog", "cat"])
    article = (f"{a} went to {place} {time}. there {a} saw {b} and gave {b} {thing}. "
               f"{b} was glad of it. {a} has a {colour} {pet}, and {b} loves it well. "
               f"then they went home together.")
    qs = [
        question(rng, f"what did {a} give to {b}?", thing, other(rng, THINGS, {thing}, 3)),
        question(rng, f"where did {a} go {time}?", place, other(rng, PLACES, {place}, 3)),
        question(rng, f"{a} has a _ {pet}.", colour, other(rng, COLOURS, {colour}, 3)),
        question(rng, f"who did {a} see there?", b, other(rng, NAMES, {a, b}, 3)),
    ]
    qs = rng.sample(qs, 3)
    return {"article": article, "questions": [q[0] for q in qs],
            "options": [q[1] for q in qs], "answers": [q[2] for q in qs],
            "id": f"small{index}.txt"}


def write(path, seed, passages):
    rng = random.Random(seed)
    with open(path, "w") as out:
        for i in range(passages):
            out.write(json.dumps(passage(rng, i)) + "\n")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(here, "race_small.jsonl"), 35, 200)
    write(os.path.join(here, "race_small_dev.jsonl"), 36, 40)
