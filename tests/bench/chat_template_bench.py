#!/usr/bin/env python3
"""The transformers side of docs/tokenizer.md's chat-template benchmark: render and tokenize many
multi-turn conversations with apply_chat_template(tokenize=True), against Odyssey's data pipeline
(odyssey-bench --chat-template, which reads the same file).

    chat_template_bench.py make --n 100000 --out convs.jsonl [--seed 22]
    chat_template_bench.py time convs.jsonl --tokenizer tokenizer.json --template T.jinja [--out F]

`make` writes N conversations in the messages format (one JSON object per line): an optional
system turn (half of them), then 1-3 user/assistant exchanges of 5-60 words each, drawn from a
fixed word list with some non-ASCII words, seeded.

`time` loads a PreTrainedTokenizerFast from the tokenizer.json alone and calls
apply_chat_template(messages, chat_template=<the file's text>, tokenize=True) once per
conversation, one process, as a training script that tokenizes its dataset conversation by
conversation does; it prints one JSON line (conversations, tokens, seconds, conversations/s,
and the sha256 of every conversation's ids as little-endian int32 in order, the digest
odyssey-bench --chat-template prints) with where and when it ran.
"""
import argparse
import datetime
import hashlib
import json
import os
import random
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORDS = ("the model reads long documents and answers questions about them with care while "
         "training runs on one GPU at a time through many steps of gradient descent over tokens "
         "attention memory budget sequence parallel kernel fused loss adapter rank layer norm "
         "déjà vu naïve café 東京 数据 模型 训练 привет мир — “quoted” 42 3.14 x=y+1; def f(): return").split()


def make(n, out, seed):
    rng = random.Random(seed)

    def text(lo, hi):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    with open(out, "w", encoding="utf-8") as f:
        for _ in range(n):
            msgs = []
            if rng.random() < 0.5:
                msgs.append({"role": "system", "content": text(5, 30)})
            for _ in range(rng.randint(1, 3)):
                msgs.append({"role": "user", "content": text(5, 60)})
                msgs.append({"role": "assistant", "content": text(5, 60)})
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")


def time_hf(data, tokenizer, template, out):
    import transformers
    from transformers import PreTrainedTokenizerFast
    from hf_bench import source_commit, utc_now

    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer)
    with open(template, encoding="utf-8") as f:
        chat_template = f.read()
    with open(data, encoding="utf-8") as f:
        convs = [json.loads(line)["messages"] for line in f if line.strip()]
    h = hashlib.sha256()
    tokens = 0
    t0 = time.perf_counter()
    for msgs in convs:
        ids = tok.apply_chat_template(msgs, chat_template=chat_template, tokenize=True, return_dict=False)
        tokens += len(ids)
        h.update(struct.pack(f"<{len(ids)}i", *ids))
    seconds = time.perf_counter() - t0
    commit, commit_source = source_commit()
    rec = {"impl": "hf", "bench": "chat_template", "data": data, "template_file": template,
           "conversations": len(convs), "tokens": tokens, "render_tokenize_s": round(seconds, 3),
           "conversations_per_s": round(len(convs) / seconds, 1), "ids_sha256": h.hexdigest(),
           "transformers": transformers.__version__, "commit": commit, "commit_source": commit_source,
           "time": utc_now(), "host": socket.gethostname()}
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--n", type=int, default=100000)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=22)
    t = sub.add_parser("time")
    t.add_argument("data")
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--template", required=True)
    t.add_argument("--out")
    args = ap.parse_args()
    if args.cmd == "make":
        make(args.n, args.out, args.seed)
    else:
        time_hf(args.data, args.tokenizer, args.template, args.out)


if __name__ == "__main__":
    main()
