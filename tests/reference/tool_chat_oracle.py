#!/usr/bin/env python3
"""What transformers gives for conversations as training samples: the oracle for Odyssey's data
pipeline (dataset records -> chat template -> token ids and trained mask), tool calls and tool
results included (issue 22). Data: tests/reference/chat_templates/.

    tool_chat_oracle.py [--fixtures a,b,...] [--now ISO] --jsonl OUT.jsonl

For every template of chat_templates/sources.json and every fixture named (fixtures that end with
the assistant's answer and take no extra template kwargs), through the public API,
PreTrainedTokenizerFast (the bundled quickstart tokenizer.json; the template's special tokens
passed as template kwargs, as apply_chat_template passes the tokenizer's):

  apply_chat_template(messages, tools=tools, chat_template=T, tokenize=True, return_dict=True,
                      return_assistant_tokens_mask=<T has {% generation %}>)

gives the ids (and, for templates with generation blocks, the trained mask). For templates
without them the trained tokens are found by rendering prefixes, the rule ms-swift and TRL use
and docs/tokenizer.md states: assistant message i is the text between
render(messages[:i], add_generation_prompt=True) and render(messages[:i+1]), which must be
prefixes of each other and of the whole render (else the record says prefix_mismatch); each
such character range becomes tokens the way transformers maps generation spans
(char_to_token of its first and last character).

Output, one JSON object per line: template, fixture, ok, and when ok text, ids, trained (0/1
per id) and mask_source ("generation" or "prefix"); when not ok error (the template raised) or
prefix_mismatch.

Pinned: transformers 5.17.0, jinja2 3.1.6.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_template_oracle as cto  # noqa: E402  (fix_clock, the manifest, the pins)
from transformers import PreTrainedTokenizerFast  # noqa: E402

# The corpus fixtures that are training samples: they end with the answer and take no kwargs.
DEFAULT_FIXTURES = ["tool_call_and_result", "parallel_tool_calls", "reasoning_content", "inline_think", "multi_turn",
                    "system_user_assistant"]


def spans_to_mask(encoding, n, spans):
    """transformers' rule for generation spans: from the token of the first character to the token of the last."""
    mask = [0] * n
    for start, end in spans:
        if end <= start:
            continue
        first = encoding.char_to_token(0, start)
        last = encoding.char_to_token(0, end - 1)
        if first is None or last is None:
            continue
        for k in range(first, last + 1):
            mask[k] = 1
    return mask


def one(tok, template, has_gen, fx, special_tokens):
    messages, tools = fx["messages"], fx.get("tools")

    def render(msgs, gen):
        return tok.apply_chat_template(msgs, tools=tools, chat_template=template, add_generation_prompt=gen,
                                       tokenize=False, **special_tokens)

    try:
        text = render(messages, False)
        out = tok.apply_chat_template(messages, tools=tools, chat_template=template, add_generation_prompt=False,
                                      tokenize=True, return_dict=True, return_assistant_tokens_mask=has_gen,
                                      **special_tokens)
    except Exception as exc:  # the template's outcome, recorded
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    ids = list(out["input_ids"])
    if has_gen:
        return {"ok": True, "text": text, "ids": ids, "trained": list(out["assistant_masks"]),
                "mask_source": "generation"}
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        try:
            before, upto = render(messages[:i], True), render(messages[: i + 1], False)
        except Exception as exc:
            return {"ok": False, "error": f"prefix render: {type(exc).__name__}: {exc}"}
        if not upto.startswith(before) or not text.startswith(upto):
            return {"ok": False, "prefix_mismatch": f"messages[{i}]"}
        spans.append((len(before), len(upto)))
    enc = tok(text, add_special_tokens=False)
    if list(enc["input_ids"]) != ids:
        raise SystemExit("apply_chat_template(tokenize=True) and encoding its text disagree")
    return {"ok": True, "text": text, "ids": ids, "trained": spans_to_mask(enc, len(ids), spans),
            "mask_source": "prefix"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default=",".join(DEFAULT_FIXTURES))
    ap.add_argument("--now", default="2026-01-15T12:00:00")
    ap.add_argument("--jsonl", required=True)
    args = ap.parse_args()
    cto.check_pins()
    cto.fix_clock(args.now)
    manifest = cto.load_manifest()
    fixtures = {}
    for name in args.fixtures.split(","):
        fx = cto.load_fixture(os.path.join(cto.FIXTURES, name + ".json"))
        if fx["add_generation_prompt"] or fx.get("extra") or fx["messages"][-1]["role"] != "assistant":
            raise SystemExit(f"{name}: not a training sample (ends with the answer, no template kwargs)")
        fixtures[name] = fx
    with open(args.jsonl, "w", encoding="utf-8") as out:
        for file, entry in sorted(manifest.items()):
            _, template = cto.read_template(os.path.join(cto.CORPUS, file))
            # The special tokens reach the template as apply_chat_template's kwargs (as the corpus
            # oracle passes them), not as tokens added to the tokenizer: the quickstart vocabulary
            # lacks most of them, and Odyssey encodes their text with the vocabulary it has.
            tok = PreTrainedTokenizerFast(tokenizer_file=cto.QUICKSTART_TOKENIZER)
            has_gen = bool(cto.GENERATION_RE.search(template))
            for name, fx in fixtures.items():
                rec = {"template": file, "fixture": name, "special_tokens": entry["special_tokens"]}
                rec.update(one(tok, template, has_gen, fx, entry["special_tokens"]))
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
