#!/usr/bin/env python3
"""What transformers renders for a chat template and a conversation: the oracle for Odyssey's
native Jinja chat-template engine (issue 22). Data: tests/reference/chat_templates/.

    chat_template_oracle.py TEMPLATE.jinja FIXTURE.json [FIXTURE.json ...]
    chat_template_oracle.py --all [--jsonl OUT.jsonl] [--summary-md OUT.md]

Rendering is transformers' own: `transformers.utils.chat_template_utils.render_jinja_template`,
the function `PreTrainedTokenizerBase.apply_chat_template` calls, with the keyword arguments
apply_chat_template passes: the tokenizer's special tokens (here: the `special_tokens` that
chat_templates/sources.json lists for the template), then the fixture's `extra` kwargs
(`enable_thinking`, ...), which win on a clash. So the jinja2 environment is transformers':
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, its `tojson` filter (json.dumps, ensure_ascii=False, no HTML escaping),
`raise_exception` (raises jinja2 TemplateError with the template's message) and `strftime_now`.

Where the template has `{% generation %}` blocks, the conversation is rendered a second time
the way apply_chat_template(return_assistant_tokens_mask=True) does (the AssistantTracker
records the span of every generation block); the text must be identical, and the spans are
written as code-point offsets (as transformers computes them) and as UTF-8 byte offsets.

The clock is fixed so that templates calling strftime_now (Llama-3.2, SmolLM3, Granite) render
the same text every day: transformers' module-level `datetime` is replaced by one whose now()
returns --now (default 2026-01-15T12:00:00, naive local time, like datetime.now()). The C++
test must give its engine the same clock.

With --all every template of sources.json is rendered with every fixture of conversations/;
the sha256 of each template file is checked against sources.json first. Unless
--no-tokenizer-check, each render is repeated through the public API, a
PreTrainedTokenizerFast (the bundled quickstart tokenizer.json, the template's special tokens)
and apply_chat_template(tokenize=False, ...), and must give the same text or the same error.

Output, one JSON object per line (stdout, or --jsonl):
  template, fixture, template_sha256, special_tokens, extra, add_generation_prompt,
  ok (true: rendered; false: the template raised),
  text (when ok),
  error {type, message, raised_by_template} (when not ok; raised_by_template is true when the
        template itself called raise_exception, false for a runtime error such as adding a
        string to a dict or reading an undefined value),
  assistant_spans, assistant_spans_utf8 (lists of [start, end) when the template has
        {% generation %}, else null).
A template that raises is an expected outcome to record (Gemma raising on a system role), not a
failure of the oracle; exit status is 0 unless the oracle itself fails (bad manifest, the two
render paths disagreeing, an unreadable fixture).

Pinned: transformers 5.17.0, jinja2 3.1.6.
"""
import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

PINS = {"transformers": "5.17.0", "jinja2": "3.1.6"}
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "chat_templates")
FIXTURES = os.path.join(CORPUS, "conversations")
QUICKSTART_TOKENIZER = os.path.join(HERE, "..", "..", "resources", "quickstart", "model", "tokenizer.json")
GENERATION_RE = re.compile(r"\{\%-?\s*generation\s*-?\%\}")  # transformers' own test for the keyword


def fix_clock(now_iso):
    fixed = _dt.datetime.fromisoformat(now_iso)

    class FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed if tz is None else fixed.astimezone(tz)

    ctu.datetime = FixedDatetime  # strftime_now() reads the module global at call time


def load_manifest():
    with open(os.path.join(CORPUS, "sources.json"), encoding="utf-8") as f:
        return {t["file"]: t for t in json.load(f)["templates"]}


def read_template(path):
    with open(path, "rb") as f:
        raw = f.read()
    return raw, raw.decode("utf-8")


def load_fixture(path):
    with open(path, encoding="utf-8") as f:
        fx = json.load(f)
    for key in ("messages", "add_generation_prompt"):
        if key not in fx:
            raise SystemExit(f"{path}: fixture has no '{key}'")
    return fx


def _error(exc):
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "raised_by_template": type(exc) is jinja2.exceptions.TemplateError,
    }


def render(template, fixture, special_tokens):
    """(ok, text_or_error, spans) through render_jinja_template, exactly as apply_chat_template calls it."""
    kwargs = {**special_tokens, **fixture.get("extra", {})}
    has_gen = bool(GENERATION_RE.search(template))
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[fixture["messages"]],
            tools=fixture.get("tools"),
            chat_template=template,
            add_generation_prompt=fixture["add_generation_prompt"],
            **kwargs,
        )
    except Exception as exc:  # the template's outcome, recorded
        return False, _error(exc), None
    text = rendered[0]
    spans = None
    if has_gen:
        rendered_m, indices = ctu.render_jinja_template(
            conversations=[fixture["messages"]],
            tools=fixture.get("tools"),
            chat_template=template,
            add_generation_prompt=fixture["add_generation_prompt"],
            return_assistant_tokens_mask=True,
            **kwargs,
        )
        if rendered_m[0] != text:
            raise SystemExit("the {% generation %} render differs from the plain render")
        spans = [list(s) for s in indices[0]]
    return True, text, spans


def utf8_spans(text, spans):
    if spans is None:
        return None
    return [[len(text[:s].encode("utf-8")), len(text[:e].encode("utf-8"))] for s, e in spans]


_TOKENIZER_CACHE = {}


def render_via_tokenizer(template, fixture, special_tokens):
    """The same render through the public API: PreTrainedTokenizerFast.apply_chat_template(tokenize=False)."""
    from transformers import PreTrainedTokenizerFast

    key = tuple(sorted(special_tokens.items()))
    tok = _TOKENIZER_CACHE.get(key)
    if tok is None:
        tok = PreTrainedTokenizerFast(tokenizer_file=QUICKSTART_TOKENIZER, **special_tokens)
        _TOKENIZER_CACHE[key] = tok
    extra = dict(fixture.get("extra", {}))
    try:
        text = tok.apply_chat_template(
            fixture["messages"],
            tools=fixture.get("tools"),
            chat_template=template,
            add_generation_prompt=fixture["add_generation_prompt"],
            tokenize=False,
            **extra,
        )
    except Exception as exc:
        return False, _error(exc)
    # special_tokens_map holds only the tokens given above, so both paths see the same kwargs
    extra_tokens = set(tok.special_tokens_map) - set(special_tokens)
    if extra_tokens:
        raise SystemExit(f"tokenizer check: unexpected special tokens {sorted(extra_tokens)}")
    return True, text


def record(template_file, sha, fixture_name, fixture, special_tokens, ok, out, spans):
    rec = {
        "template": template_file,
        "fixture": fixture_name,
        "template_sha256": sha,
        "special_tokens": special_tokens,
        "extra": fixture.get("extra", {}),
        "add_generation_prompt": fixture["add_generation_prompt"],
        "ok": ok,
    }
    if ok:
        rec["text"] = out
        rec["assistant_spans"] = spans
        rec["assistant_spans_utf8"] = utf8_spans(out, spans)
    else:
        rec["error"] = out
        rec["assistant_spans"] = None
        rec["assistant_spans_utf8"] = None
    return rec


def check_pins():
    got = {"transformers": transformers.__version__, "jinja2": jinja2.__version__}
    if got != PINS:
        print(f"warning: pinned {PINS}, running {got}", file=sys.stderr)
    return got


def fixture_files():
    return sorted(f for f in os.listdir(FIXTURES) if f.endswith(".json"))


def run_all(args, manifest, out):
    fixtures = [(f[:-5], load_fixture(os.path.join(FIXTURES, f))) for f in fixture_files()]
    rows = []
    for tf, entry in manifest.items():
        raw, template = read_template(os.path.join(CORPUS, tf))
        sha = hashlib.sha256(raw).hexdigest()
        if sha != entry["sha256"] or len(raw) != entry["bytes"]:
            raise SystemExit(f"{tf}: sha256/size differ from sources.json: the file is no longer the model's bytes")
        st = entry["special_tokens"]
        n_ok, raised, runtime, with_spans = 0, [], [], 0
        for name, fx in fixtures:
            ok, res, spans = render(template, fx, st)
            if not args.no_tokenizer_check:
                ok2, res2 = render_via_tokenizer(template, fx, st)
                same = (ok2 == ok) and (res2 == res if ok else res2["type"] == res["type"] and res2["message"] == res["message"])
                if not same:
                    raise SystemExit(f"{tf} x {name}: apply_chat_template(tokenize=False) and render_jinja_template disagree")
            out.write(json.dumps(record(tf, sha, name, fx, st, ok, res, spans), ensure_ascii=False) + "\n")
            if ok:
                n_ok += 1
                with_spans += spans is not None
            elif res["raised_by_template"]:
                raised.append((name, res["message"]))
            else:
                runtime.append((name, f'{res["type"]}: {res["message"]}'))
        rows.append(dict(template=tf, model=entry["model_id"], rendered=n_ok, raised=raised, runtime=runtime,
                         gen=entry["has_generation_block"], spans=with_spans))
    return rows, [n for n, _ in fixtures]


def summary_table(rows, fixture_names, versions, cmd, now, tokenizer_check):
    total = len(rows) * len(fixture_names)
    n_ok = sum(r["rendered"] for r in rows)
    n_raise = sum(len(r["raised"]) for r in rows)
    n_rt = sum(len(r["runtime"]) for r in rows)
    lines = [
        "# Chat-template oracle summary",
        "",
        f"Command: `{cmd}`  ",
        f"transformers {versions['transformers']}, jinja2 {versions['jinja2']}, Python {sys.version.split()[0]}; "
        f"clock fixed at {now}; "
        + ("every render also repeated through PreTrainedTokenizerFast.apply_chat_template(tokenize=False) "
           "and found identical." if tokenizer_check else "tokenizer-path check skipped."),
        "",
        f"{len(rows)} templates x {len(fixture_names)} fixtures = {total} renders: {n_ok} rendered, "
        f"{n_raise} raised by the template (raise_exception), {n_rt} runtime errors inside the template.",
        "",
        "| template | rendered | raised (raise_exception) | runtime error | {% generation %} spans |",
        "| --- | ---: | --- | --- | --- |",
    ]
    for r in rows:
        raised = "; ".join(f"`{n}`" for n, _ in r["raised"]) or "-"
        rt = "; ".join(f"`{n}`" for n, _ in r["runtime"]) or "-"
        gen = f"yes ({r['spans']} renders)" if r["gen"] else "-"
        lines.append(f"| {r['template']} | {r['rendered']}/{len(fixture_names)} | {raised} | {rt} | {gen} |")
    lines += ["", "## Messages", "",
              "What each template said when it raised (`raise_exception`), or the runtime error "
              "(type: message), grouped by message.", ""]
    by_msg = {}
    for r in rows:
        for n, m in r["raised"]:
            by_msg.setdefault(("raise_exception", m), []).append(f"{r['template'][:-6]} x {n}")
        for n, m in r["runtime"]:
            by_msg.setdefault(("runtime", m), []).append(f"{r['template'][:-6]} x {n}")
    for (kind, m), where in sorted(by_msg.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1])):
        m1 = m.replace("\n", " ").replace("|", "\\|")
        if len(m1) > 160:
            m1 = m1[:157] + "..."
        lines.append(f"- {kind}: \"{m1}\" ({len(where)}): " + ", ".join(where))
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", nargs="?", help="a .jinja file (its special tokens come from sources.json by file name)")
    ap.add_argument("fixtures", nargs="*", help="conversation fixture .json files")
    ap.add_argument("--all", action="store_true", help="every template of sources.json x every fixture of conversations/")
    ap.add_argument("--special-tokens", help="JSON object of special tokens, replacing the sources.json entry")
    ap.add_argument("--now", default="2026-01-15T12:00:00", help="what strftime_now sees as the current time")
    ap.add_argument("--jsonl", help="write the JSON lines here instead of stdout")
    ap.add_argument("--summary-md", help="with --all: write the summary table (markdown) here too")
    ap.add_argument("--no-tokenizer-check", action="store_true", help="with --all: skip the apply_chat_template cross-check")
    args = ap.parse_args()

    versions = check_pins()
    fix_clock(args.now)
    manifest = load_manifest()
    out = open(args.jsonl, "w", encoding="utf-8", newline="\n") if args.jsonl else sys.stdout

    if args.all:
        rows, names = run_all(args, manifest, out)
        cmd = "python tests/reference/chat_template_oracle.py --all" + (" --no-tokenizer-check" if args.no_tokenizer_check else "")
        if args.now != ap.get_default("now"):
            cmd += f" --now {args.now}"
        table = summary_table(rows, names, versions, cmd, args.now, not args.no_tokenizer_check)
        if args.summary_md:
            with open(args.summary_md, "w", encoding="utf-8", newline="\n") as f:
                f.write(table)
        print(table, file=sys.stderr if out is sys.stdout else sys.stdout)
        return 0

    if not args.template or not args.fixtures:
        ap.error("give a template and at least one fixture, or --all")
    raw, template = read_template(args.template)
    name = os.path.basename(args.template)
    if args.special_tokens:
        st = json.loads(args.special_tokens)
    elif name in manifest:
        st = manifest[name]["special_tokens"]
    else:
        print(f"{name}: not in sources.json; rendering with no special tokens (use --special-tokens)", file=sys.stderr)
        st = {}
    sha = hashlib.sha256(raw).hexdigest()
    for fpath in args.fixtures:
        fx = load_fixture(fpath)
        ok, res, spans = render(template, fx, st)
        fname = os.path.basename(fpath)[:-5] if fpath.endswith(".json") else os.path.basename(fpath)
        out.write(json.dumps(record(name, sha, fname, fx, st, ok, res, spans), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
