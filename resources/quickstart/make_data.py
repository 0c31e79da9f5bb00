#!/usr/bin/env python3
"""Writes the quickstart's bundled data: small tasks with checkable answers (addition,
multiplication, reversing and counting letters) so a tiny model visibly learns on a CPU.
Deterministic: running it again reproduces data/train.jsonl (messages format) and
data/val.jsonl (alpaca format) byte for byte."""
import json
import os
import random

random.seed(7)
WORDS = ("apple river stone cloud tiger paper music garden silver window orange planet "
         "candle forest dragon pencil mirror rocket violin castle").split()


def sample():
    k = random.randrange(4)
    if k == 0:
        a, b = random.randrange(100), random.randrange(100)
        return f"What is {a} + {b}?", str(a + b)
    if k == 1:
        w = random.choice(WORDS)
        return f"Reverse the word {w}.", w[::-1]
    if k == 2:
        w = random.choice(WORDS)
        return f"How many letters are in {w}?", str(len(w))
    a, b = random.randrange(10), random.randrange(10)
    return f"What is {a} times {b}?", str(a * b)


def write(path, n, fmt):
    with open(path, "w") as f:
        for _ in range(n):
            q, a = sample()
            if fmt == "messages":
                rec = {"messages": [{"role": "system", "content": "You answer with the result only."},
                                    {"role": "user", "content": q},
                                    {"role": "assistant", "content": a}]}
            else:
                rec = {"instruction": q, "input": "", "output": a}
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    write(os.path.join(here, "train.jsonl"), 2000, "messages")
    write(os.path.join(here, "val.jsonl"), 100, "alpaca")
