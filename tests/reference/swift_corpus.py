#!/usr/bin/env python3
"""ms-swift itself checks Odyssey's ms-swift bridge (issue 25): every command `export-swift`
writes, for every bundled preset and for ms-swift's own example commands and YAML configs
(tests/reference/swift_examples/), is parsed by ms-swift 4.6's argument parser, and a round
trip (ms-swift command → `odyssey-train import-swift` → preset → `export-swift`) must not
change the value ms-swift reads for any argument the original gave.

    swift_corpus.py ODYSSEY_TRAIN SOURCE_DIR [--table]

Runs in a Python where ms-swift is installed (packaging/install-deps.sh makes
~/.cache/odyssey/venv-swift: ms-swift 4.6.0 over the reference venv, peft 0.20 shadowing 0.21
there only). How ms-swift is asked, without downloading or loading anything: ms-swift's own
`swift.cli.main.parse_yaml_args` turns a YAML config into arguments as `swift sft x.yaml`
does; transformers' `HfArgumentParser` over `swift.arguments.SftArguments` (with ms-swift's
own type-hint patch, as `swift.utils.parse_args` builds it) parses them with every field's
type and choices (`parse_known_args`: an unknown argument, a wrong type or a value outside the
choices is a rejection); then `SftArguments._check_padding_free`, the __post_init__ check that
refuses packing and padding-free without flash attention, runs on the parsed values. The rest
of __post_init__ resolves the model and downloads, and is not run.

Exit 0 when every command is accepted and every round trip keeps the values; 1 otherwise.
--table prints the corpus table (markdown) for docs/swift-bridge.md.
"""
import argparse
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Examples Odyssey refuses to import on purpose (core/config/swift_import.cpp kNotHonoured):
# the import must fail naming the reason, and ms-swift must still accept the original.
EXPECTED_REFUSALS = {
    "train__tuners__dora__train.sh": "--use_dora",
    "train__multi-gpu__deepspeed__train_zero3.sh": "--deepspeed zero3",
    "train__full__qwen2_5_32b.sh": "--deepspeed zero3",
    "train__liger__sft.sh": "--deepspeed zero3",
    "train__padding_free__sft.sh": "--deepspeed zero3",
    "train__tuners__neftune__train.sh": "--neftune_noise_alpha",
}

# Values ms-swift reads differently but that mean the same (the bridge's documented mappings).
SAME = {
    ("attn_impl", "flash_attention_2"): "flash_attn",
    ("train_type", None): None,
}


def swift_parser():
    from transformers import HfArgumentParser
    from swift.arguments import SftArguments
    from swift.utils.utils import _patch_get_type_hints
    with _patch_get_type_hints():
        return HfArgumentParser([SftArguments]), SftArguments


def swift_argv_of_script(text):
    """The words after `swift sft` in a shell script, and its env assignments (continuations
    joined, comments dropped); None when the script has no `swift sft` line."""
    joined = text.replace("\\\n", " ")
    env = {}
    for line in joined.splitlines():
        # As bash reads it: '#' starts a comment only at the start of a word (a#b is one word).
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        words = []
        for w in lexer:
            if w.startswith("#"):
                break
            words.append(w)
        if not words:
            continue
        if words[0] == "export":
            for w in words[1:]:
                if "=" in w:
                    k, v = w.split("=", 1)
                    env[k] = v
            continue
        i = 0
        local = {}
        while i < len(words) and "=" in words[i] and not words[i].startswith("-"):
            k, v = words[i].split("=", 1)
            local[k] = v
            i += 1
        if i + 1 < len(words) and words[i] == "swift" and words[i + 1] == "sft":
            env.update(local)
            return words[i + 2:], env
    return None, env


def swift_argv_by_bash(path):
    """What bash hands `swift` when it runs the script: `swift` (and torchrun-free launchers)
    replaced by a function that prints its arguments and the environment it would see, so
    $(expr …), variables and quoting are bash's own. The script is run with nothing else
    able to start: only the first `swift sft` call is recorded, then the script stops."""
    shim = (
        'swift() { if [ "$1" = sft ]; then shift; "$ODYSSEY_PY" -c '
        '"import json,os,sys; print(json.dumps({\\"argv\\": sys.argv[1:], \\"env\\": '
        '{k: os.environ[k] for k in (\\"NPROC_PER_NODE\\", \\"CUDA_VISIBLE_DEVICES\\", \\"NNODES\\") '
        'if k in os.environ}}))" "$@"; exit 0; fi; }\n'
        'nproc() { echo 8; }\n'
    )
    script = open(path, encoding="utf-8").read()
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir(), "ODYSSEY_PY": sys.executable}
    out = subprocess.run(["bash", "-c", shim + script], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(path), timeout=60)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            got = json.loads(line)
            return got["argv"], got["env"]
    raise RuntimeError(f"{path}: bash ran no `swift sft` ({out.stderr.strip()[:300]})")


def mapped_swift_names(odyssey):
    """ms-swift argument names Odyssey maps: `odyssey-train show --keys` marks each key's."""
    out = subprocess.run([odyssey, "show", "--keys"], capture_output=True, text=True, check=True).stdout
    names = {"deepspeed"}
    for line in out.splitlines():
        if "[ms-swift --" in line:
            names.add(line.split("[ms-swift --", 1)[1].split("]", 1)[0].split()[0])
    return names


def allowed_change(name, before, after, env):
    """The documented mappings (docs/swift-bridge.md) that change what ms-swift reads but not
    what is trained: a template name becomes auto (Odyssey takes the model's template);
    DeepSpeed on one process becomes stage 0; flash_attention_2 is written flash_attn."""
    if name == "template" and after is None:
        return True
    if name == "deepspeed" and after is None and int(env.get("NPROC_PER_NODE", "1") or 1) == 1:
        return True
    if name == "attn_impl" and {before, after} <= {"flash_attn", "flash_attention_2"}:
        return True
    return False


def parse(parser, cls, argv, cwd):
    """ms-swift's verdict on `swift sft ARGV`: (accepted, message, {name: value})."""
    argv = list(argv)
    from swift.cli.main import parse_yaml_args
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            parse_yaml_args(argv)  # ms-swift's own YAML/JSON expansion
    finally:
        os.chdir(old)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return False, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exit", {}, {}
    if unknown:
        return False, "unknown arguments: " + " ".join(unknown), {}, {}
    try:
        cls._check_padding_free(argparse.Namespace(**vars(ns)))
    except ValueError as e:
        return False, str(e), {}, {}
    given = set()
    for w in argv:
        if w.startswith("--"):
            given.add(w[2:].split("=", 1)[0].replace("-", "_"))
    return True, "", {k: v for k, v in vars(ns).items() if k in given}, vars(ns)


def export_argv(odyssey, preset):
    out = subprocess.run([odyssey, "export-swift", preset], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"export-swift {preset}: exit {out.returncode}: {out.stderr.strip()}")
    text = "\n".join(l for l in out.stdout.splitlines() if not l.startswith("#"))
    argv, env = swift_argv_of_script(text)
    return argv, env, out.stdout


def norm(name, v):
    if isinstance(v, list):
        return [norm(name, x) for x in v]
    return SAME.get((name, v), v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("odyssey")
    ap.add_argument("source")
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    a.odyssey = os.path.abspath(a.odyssey)
    a.source = os.path.abspath(a.source)
    parser, cls = swift_parser()
    mapped = mapped_swift_names(a.odyssey)
    rows, failures = [], []
    tmp = tempfile.mkdtemp(prefix="swift-corpus-")

    # 1. Every bundled preset's export is a command ms-swift accepts.
    presets = sorted(os.listdir(os.path.join(a.source, "presets")))
    for p in presets:
        if not p.endswith(".yaml"):
            continue
        argv, _, text = export_argv(a.odyssey, os.path.join(a.source, "presets", p))
        ok, msg, _, _ = parse(parser, cls, argv, tmp)
        rows.append((f"presets/{p} (export-swift)", ok, "—" if ok else msg))
        if not ok:
            failures.append(f"presets/{p}: ms-swift rejects the exported command: {msg}\n{text}")

    # 2. ms-swift's examples: accepted as written, imported, exported, accepted again, same values.
    ex_dir = os.path.join(a.source, "tests", "reference", "swift_examples")
    for name in sorted(os.listdir(ex_dir)):
        if not (name.endswith(".sh") or name.endswith(".yaml")):
            continue
        path = os.path.join(ex_dir, name)
        if name.endswith(".yaml"):
            orig, env = [path], {}
        else:
            orig, env = swift_argv_by_bash(path)
        ok, msg, before, _ = parse(parser, cls, orig, ex_dir)
        if not ok:
            rows.append((name, False, "ms-swift rejects the original: " + msg))
            failures.append(f"{name}: ms-swift rejects its own example: {msg}")
            continue
        preset = os.path.join(tmp, name + ".odyssey.yaml")
        imp = subprocess.run([a.odyssey, "import-swift", path, "-o", preset, "--force"], capture_output=True, text=True,
                             cwd=ex_dir)
        if imp.returncode != 0:
            first = next((l for l in imp.stderr.splitlines() if "error:" in l), imp.stderr.strip()[:200])
            want = EXPECTED_REFUSALS.get(name)
            if want and want in first:
                rows.append((name, True, "import refused, as intended: " + first[first.find(want):][:80].rstrip() + " …"))
            else:
                rows.append((name, True, "import failed: " + first))
                failures.append(f"{name}: import-swift exit {imp.returncode}: {imp.stderr.strip()}")
            continue
        if name in EXPECTED_REFUSALS:
            failures.append(f"{name}: import-swift accepted what it should refuse ({EXPECTED_REFUSALS[name]})")
        argv, _, text = export_argv(a.odyssey, preset)
        ok2, msg2, _, after = parse(parser, cls, argv, tmp)
        if not ok2:
            rows.append((name, True, "ms-swift rejects the round trip: " + msg2))
            failures.append(f"{name}: ms-swift rejects the exported command: {msg2}\n{text}")
            continue
        # Every argument the original gives that Odyssey maps must read the same in ms-swift
        # after the round trip (given again or ms-swift's default); the others are not in the
        # export: import listed them as not imported, or Odyssey does what they ask without a
        # key of its own (--loss_scale ignore_empty_think).
        changed, kept, allowed = [], 0, []
        dropped = sorted(k for k in before if k not in mapped)
        for k, v in before.items():
            if k not in mapped:
                continue
            if norm(k, after.get(k)) == norm(k, v):
                kept += 1
            elif allowed_change(k, v, after.get(k), env):
                allowed.append(f"{k} {v!r} → {after.get(k)!r}")
            else:
                changed.append(f"--{k}: {v!r} -> {after.get(k)!r}")
        if changed:
            rows.append((name, True, "round trip changed " + "; ".join(changed)))
            failures.append(f"{name}: the round trip changed values: {changed}\n{text}")
        else:
            rows.append((name, True, f"equal: {kept} mapped arguments read the same" +
                         (f"; documented mappings: {', '.join(allowed)}" if allowed else "") +
                         f"; not in the export: {', '.join(dropped) or 'none'}"))

    if a.table:
        print("| command | ms-swift accepts | round trip |")
        print("|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {'yes' if r[1] else 'NO'} | {r[2]} |")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    print(f"swift_corpus: {len(rows)} commands, {len(failures)} failures", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
