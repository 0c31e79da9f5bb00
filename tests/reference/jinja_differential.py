#!/usr/bin/env python3
"""Differential oracle for Odyssey's native Jinja engine (core/tokenizer/jinja.h, issue 22).

    jinja_differential.py --seed 22 --n 2000 --jsonl OUT.jsonl

Generates N small random templates from a grammar of the constructs the engine supports
(statements, expressions, filters, tests, methods, whitespace control) with random contexts,
renders each with jinja2 configured exactly as transformers' apply_chat_template configures it
(transformers.utils.chat_template_utils._compile_jinja_template: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, AssistantTracker, its tojson, raise_exception,
strftime_now with the clock fixed at 2026-01-15T12:00:00) and writes one JSON object per line:
  {"template", "context", "ok": true, "text"}  or  {"template", "context", "ok": false, "error"}.
tests/core/tst_jinja.cpp (differential) renders every case natively: the same text where jinja2
rendered, an error where jinja2 raised. The output depends only on the seed and N.
"""
import argparse
import warnings
import datetime as _dt
import json
import random
import sys

import transformers.utils.chat_template_utils as ctu

NOW = _dt.datetime(2026, 1, 15, 12, 0, 0)


class FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW if tz is None else NOW.astimezone(tz)


ctu.datetime = FixedDatetime

STRINGS = ["", "a", "Hello", "  pad  ", "x y  z", "it's", 'say "hi"', "line1\nline2", "tab\there",
           "caf\u00e9", "\u4f60\u597d", "A,B,C", "<think>r</think>ans", "MiXeD", "  \n lead", "trail \n",
           "a-b c(d", "42", "3.5", "back\\slash", "emoji \U0001F600"]
KEYS = ["role", "content", "name", "k", "x", "type"]
ROLES = ["system", "user", "assistant", "tool"]
STR_METHODS = ["strip()", "lstrip()", "rstrip()", "upper()", "lower()", "title()", "capitalize()",
               "split()", "split(',')", "split(' ', 1)", "rsplit(',', 1)", "startswith('a')", "endswith('n')",
               "replace('a', 'X')", "strip('x ')", "lstrip('<')", "rstrip('>')", "startswith(('H', 'a'))",
               "find('a')", "count('a')", "splitlines()"]
STR_FILTERS = ["trim", "upper", "lower", "capitalize", "title", "length", "string", "tojson", "list",
               "reverse", "wordcount", "replace('a', 'b')", "trim('x')", "indent(2)", "indent(2, first=true)",
               "first", "last", "default('D')", "int", "float", "count", "unique|list"]
LIST_FILTERS = ["length", "join(', ')", "join", "first", "last", "list", "tojson", "tojson(indent=2)",
                "reverse|list", "sort", "unique|list", "select('string')|list", "reject('none')|list",
                "map('string')|list", "sum", "min", "max", "count", "string", "default([])", "tojson(sort_keys=true)"]
DICT_FILTERS = ["items|list", "dictsort", "tojson", "length", "list", "string", "tojson(indent=4)",
                "dictsort(reverse=true)", "dictsort(by='value')"]
NUM_FILTERS = ["abs", "round", "round(1)", "int", "float", "string", "tojson", "default(7)"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping",
         "sequence", "iterable", "true", "false", "odd", "even", "divisibleby 2", "equalto 'a'", "eq 1",
         "in ['a', 1]", "lower", "upper", "callable", "ne 2"]


class Gen:
    def __init__(self, rng):
        self.r = rng
        self.loop_depth = 0
        self.macros = []

    def choice(self, xs):
        return self.r.choice(xs)

    # ---- contexts ----
    def scalar(self):
        k = self.r.randrange(6)
        if k == 0:
            return self.choice(STRINGS)
        if k == 1:
            return self.r.randint(-5, 20)
        if k == 2:
            return self.choice([0.5, 1.0, 2.25, -3.5, 0.1, 1e-05, 12345.678, 1e17])
        if k == 3:
            return self.choice([True, False])
        if k == 4:
            return None
        return self.choice(STRINGS[:8])

    def context(self):
        msgs = []
        for i in range(self.r.randint(0, 4)):
            m = {"role": self.choice(ROLES), "content": self.choice(STRINGS)}
            if self.r.random() < 0.2:
                m["tool_calls"] = [{"function": {"name": "f", "arguments": {"a": self.r.randint(0, 3)}}}]
            msgs.append(m)
        return {
            "s": self.choice(STRINGS),
            "t": self.choice(STRINGS),
            "n": self.r.randint(-3, 12),
            "f": self.choice([0.5, 2.0, -1.25, 3.14159, 100.0]),
            "b": self.choice([True, False]),
            "z": None,
            "l": [self.scalar() for _ in range(self.r.randint(0, 4))],
            "ls": [self.choice(STRINGS) for _ in range(self.r.randint(0, 4))],
            "ln": [self.r.randint(-3, 9) for _ in range(self.r.randint(0, 5))],
            "d": {k: self.scalar() for k in self.r.sample(KEYS, self.r.randint(0, 4))},
            "messages": msgs,
            "bos_token": "<s>",
        }

    # ---- expressions ----
    def str_lit(self):
        s = self.choice(STRINGS)
        ascii_ok = all(ord(c) <= 0xFFFF for c in s)  # no surrogate-pair escapes (lone surrogates in Python)
        return json.dumps(s, ensure_ascii=ascii_ok and self.r.random() < 0.3) if self.r.random() < 0.5 else \
            "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t") + "'"

    def e_str(self, d):
        if d <= 0:
            return self.choice(["s", "t", self.str_lit(), "d.content", "messages[0].role", "ls[0]",
                                "bos_token", "d.get('k', 'none')", "s"])
        k = self.r.randrange(9)
        if k == 0:
            return f"{self.e_str(d - 1)} ~ {self.e_any(d - 1)}"
        if k == 1:
            return f"{self.e_str(d - 1)} + {self.e_str(d - 1)}"
        if k == 2:
            return f"({self.e_str(d - 1)}).{self.choice(STR_METHODS)}"
        if k == 3:
            return f"({self.e_str(d - 1)})|{self.choice(STR_FILTERS)}"
        if k == 4:
            return f"({self.e_str(d - 1)})[{self.slice()}]"
        if k == 5:
            return f"({self.e_str(d - 1)} if {self.e_bool(d - 1)} else {self.e_str(d - 1)})"
        if k == 6:
            return f"({self.e_list(d - 1)})|join({self.str_lit()})"
        if k == 7:
            return f"({self.e_any(d - 1)})|string"
        return f"{self.e_str(d - 1)} * {self.r.randint(0, 3)}"

    def slice(self):
        parts = [self.choice(["", "1", "-1", "0", "2", "-2"]) for _ in range(2)]
        s = ":".join(parts)
        if self.r.random() < 0.3:
            s += ":" + self.choice(["-1", "2", ""])
        if self.r.random() < 0.3:
            s = self.choice(["0", "-1", "1"])
        return s

    def e_num(self, d):
        if d <= 0:
            return self.choice(["n", "f", str(self.r.randint(-9, 99)), self.choice(["1.5", "0.25", "2.0", "1e3"]),
                                "l|length", "ln|length", "s|length"])
        k = self.r.randrange(6)
        op = self.choice(["+", "-", "*", "/", "//", "%", "**"])
        if k == 0 or k == 1:
            rhs = self.e_num(d - 1) if op not in ("**",) else str(self.r.randint(0, 3))
            return f"({self.e_num(d - 1)} {op} {rhs})"
        if k == 2:
            return f"({self.e_num(d - 1)})|{self.choice(NUM_FILTERS)}"
        if k == 3:
            return f"-({self.e_num(d - 1)})"
        if k == 4:
            return f"({self.e_list(d - 1)})|length"
        return f"({self.e_str(d - 1)})|{self.choice(['int', 'float', 'length', 'wordcount'])}"

    def e_bool(self, d):
        if d <= 0:
            return self.choice(["b", "true", "false", "True", "None", "z is none", "u is defined", "s", "l", "n", "d"])
        k = self.r.randrange(7)
        if k == 0:
            return f"(({self.e_any(d - 1)}) is {'not ' if self.r.random() < 0.3 else ''}{self.choice(TESTS)})"
        if k == 1:
            return f"{self.e_bool(d - 1)} {self.choice(['and', 'or'])} {self.e_bool(d - 1)}"
        if k == 2:
            return f"not {self.e_bool(d - 1)}"
        if k == 3:
            return f"{self.e_num(d - 1)} {self.choice(['<', '<=', '>', '>=', '==', '!='])} {self.e_num(d - 1)}"
        if k == 4:
            return f"{self.e_str(d - 1)} {self.choice(['in', 'not in', '==', '!=', '<'])} {self.e_str(d - 1)}"
        if k == 5:
            return f"{self.e_any(d - 1)} in {self.e_list(d - 1)}"
        return f"'{self.choice(KEYS)}' in d"

    def e_list(self, d):
        if d <= 0:
            return self.choice(["l", "ls", "ln", "messages", "[1, 2, 3]", "['b', 'a', 'c']", "[]", "d.keys()|list",
                                "range(3)", "(1, 'x')", "[none, true, 0.5]"])
        k = self.r.randrange(7)
        if k == 0:
            return f"({self.e_list(d - 1)})[{self.slice()}]"
        if k == 1:
            return f"({self.e_list(d - 1)} + {self.e_list(d - 1)})"
        if k == 2:
            return f"({self.e_str(d - 1)}).split({self.choice(['', repr(','), repr(' ')])})"
        if k == 3:
            return f"messages|selectattr('role', 'equalto', '{self.choice(ROLES)}')|list"
        if k == 4:
            return f"messages|map(attribute='{self.choice(['role', 'content'])}')|list"
        if k == 5:
            return f"[{', '.join(self.e_any(d - 1) for _ in range(self.r.randint(0, 3)))}]"
        return f"({self.e_list(d - 1)})|{self.choice(['reverse|list', 'sort', 'unique|list', 'list', 'select|list'])}"

    def e_dict(self, d):
        if d <= 0:
            return self.choice(["d", "{}", "{'a': 1, 'b': 'x'}", "messages[0]", "dict(a=1, z=none)"])
        return "{" + ", ".join(f"'{self.choice(KEYS)}': {self.e_any(d - 1)}" for _ in range(self.r.randint(0, 3))) + "}"

    def e_any(self, d):
        k = self.r.randrange(10)
        if k < 3:
            return self.e_str(d)
        if k < 5:
            return self.e_num(d)
        if k < 6:
            return self.e_bool(d)
        if k < 8:
            return self.e_list(d)
        if k < 9:
            return f"{self.e_dict(d)}" + (("|" + self.choice(DICT_FILTERS)) if self.r.random() < 0.5 else "")
        return self.choice(["u", "u.x", "d.missing", "z", "l[7]", "d['role']", "messages[-1].content"])

    # ---- statements ----
    def ws(self):
        return self.choice(["", "", "", "\n", "  ", "\n  ", " \n", "\n\n", "\t"])

    def open_(self, kind):
        mod = self.choice(["", "", "", "-", "+"]) if kind == "%" else self.choice(["", "", "-"])
        return "{" + kind + mod + " "

    def close(self, kind):
        mod = self.choice(["", "", "", "-", "+"]) if kind == "%" else self.choice(["", "", "-"])
        return " " + mod + ("%}" if kind == "%" else "}}")

    def tag(self, body):
        return self.open_("%") + body + self.close("%")

    def out(self, d):
        return self.open_("{") + self.e_any(d) + self.close("{")

    def block(self, depth, n=None):
        parts = []
        for _ in range(n if n is not None else self.r.randint(1, 4)):
            parts.append(self.ws())
            parts.append(self.stmt(depth))
        parts.append(self.ws())
        return "".join(parts)

    def stmt(self, depth):
        d = self.r.randint(0, 2)
        k = self.r.randrange(14 if depth > 0 else 4)
        if k == 0:
            return self.out(d)
        if k == 1:
            return self.choice(["text", "A b", "<|im_start|>", "é", "x\n", "  y", "{# note #}", "{#- c -#}"])
        if k == 2:
            var = self.choice(["v", "w"])
            return self.tag(f"set {var} = {self.e_any(d)}") + self.open_("{") + var + self.close("{")
        if k == 3:
            return self.out(d)
        if k in (4, 5):
            s = self.tag(f"if {self.e_bool(d)}") + self.block(depth - 1)
            for _ in range(self.r.randint(0, 2)):
                s += self.tag(f"elif {self.e_bool(d)}") + self.block(depth - 1)
            if self.r.random() < 0.5:
                s += self.tag("else") + self.block(depth - 1)
            return s + self.tag("endif")
        if k in (6, 7):
            var = self.choice(["x", "item", "m"])
            it = self.e_list(d)
            head = f"for {var} in {it}"
            if self.r.random() < 0.2:
                head = f"for k, v in {self.e_dict(0)}.items()"
                var = "k"
            if self.r.random() < 0.2:
                head += f" if {self.e_bool(0)}"
            self.loop_depth += 1
            body = self.block(depth - 1)
            loopv = self.choice(["loop.index", "loop.index0", "loop.first", "loop.last", "loop.length",
                                 "loop.revindex", "loop.previtem", "loop.nextitem", var, var + "|string"])
            body += self.open_("{") + loopv + self.close("{")
            if self.r.random() < 0.3:
                body += self.tag(f"if {self.e_bool(0)}") + self.tag(self.choice(["break", "continue"])) + self.tag("endif")
            self.loop_depth -= 1
            s = self.tag(head) + body
            if self.r.random() < 0.3:
                s += self.tag("else") + self.block(depth - 1, 1)
            return s + self.tag("endfor")
        if k == 8:
            return (self.tag("set ns = namespace(acc='', c=0)") + self.tag(f"for x in {self.e_list(d)}") +
                    self.tag("set ns.acc = ns.acc ~ x") + self.tag("set ns.c = ns.c + 1") + self.tag("endfor") +
                    self.open_("{") + self.choice(["ns.acc", "ns.c", "ns.acc|length", "ns.missing"]) + self.close("{"))
        if k == 9:
            name = "mac" + str(len(self.macros))
            params, call_args, uses = self.choice([
                ("a", self.choice(["s", "1", "a=l", ""]), ["a", "a|string"]),
                ("a, b=1", self.choice(["s", "1, 2", "'q', b=n", "b=3"]), ["a ~ b", "b", "a"]),
                ("a, b='x', c=none", self.choice(["1", "1, c='z'", "s, t, n"]), ["a ~ b ~ c", "c", "b"]),
                ("", "", ["'m'", "s"])])
            body = self.block(0, 2) + "{{ " + self.choice(uses) + " }}"
            return self.tag(f"macro {name}({params})") + body + self.tag("endmacro") + \
                self.open_("{") + f"{name}({call_args})" + self.choice(["", "|trim", "|upper", "|length"]) + self.close("{")
        if k == 10:
            return self.tag("set blk") + self.block(depth - 1) + self.tag("endset") + "[{{ blk }}]"
        if k == 11:
            flt = self.choice(["trim", "upper", "lower", "title", "indent(2)", 'replace("a", "o")'])
            return self.tag("filter " + flt) + \
                self.block(depth - 1) + self.tag("endfilter")
        if k == 12:
            return self.tag("generation") + self.block(depth - 1) + self.tag("endgeneration")
        if self.r.random() < 0.5:
            return self.extra(d)
        return self.open_("{") + self.choice([
            "strftime_now('%Y-%m-%d %H:%M %A %b')", "raise_exception('boom') if n > 10 else 'ok'",
            "messages|tojson", "tools is none", "(messages|last).role if messages else 'none'",
            "messages[0]['content'] if messages|length > 0 else ''", "range(n if n > 0 else 1)|list",
            "d|items|list", "ls|map('upper')|join('|')", "[1, 2, 3][::-1]", "{'a': [1, {'b': none}]}"]) + self.close("{")

    # less common constructs: with, call blocks, varargs/kwargs, tuple set, raw, loop.cycle,
    # tojson options, sorting and attribute filters, tests with arguments, str methods, escapes
    def extra(self, d):
        k = self.r.randrange(12)
        if k == 0:
            return self.tag(f"with a = {self.e_any(d)}, b2 = {self.e_num(0)}") + "{{ a }}|{{ b2 }}" + self.tag("endwith") + "{{ a is defined }}"
        if k == 1:
            return (self.tag("macro wrap(x='w')") + "<{{ x }}:{{ caller() }}>" + self.tag("endmacro") +
                    self.tag(f"call wrap({self.choice(['', 's', 'x=n'])})") + self.block(0, 2) + self.tag("endcall"))
        if k == 2:
            return (self.tag("macro va(a)") + "{{ a }}{{ varargs }}{{ kwargs }}" + self.tag("endmacro") +
                    "{{ va(" + self.choice(["1", "1, 2, 3", "1, k=2", "s, t, z=none"]) + ") }}")
        if k == 3:
            return self.tag(f"set p, q = {self.choice(['(1, 2)', '[s, t]', 'ln[:2] if ln|length > 1 else (0, 0)', 'd.items()|list|first if d else (1, 2)'])}") + "{{ p }}-{{ q }}"
        if k == 4:
            return "{% raw %}{{ not rendered }}{% endraw %}" + self.choice(["", "\n", "  "])
        if k == 5:
            return self.tag(f"for x in {self.e_list(0)}") + "{{ loop.cycle('odd', 'even') }}{{ loop.revindex0 }}{{ loop.depth }}" + self.tag("endfor")
        if k == 6:
            return "{{ " + self.choice([
                "d|tojson(separators=(',', ':'))", "messages|tojson(sort_keys=true)", "s|tojson(ensure_ascii=true)",
                "l|tojson(indent='\t')", "[s, t]|tojson(indent=1)", "{'b': [], 'a': {}}|tojson(indent=2)"]) + " }}"
        if k == 7:
            return "{{ " + self.choice([
                "messages|sort(attribute='role')|map(attribute='role')|join(',')", "d|dictsort(case_sensitive=true)",
                "messages|map(attribute='name', default='anon')|list", "messages|selectattr('content')|list|length",
                "messages|rejectattr('role', 'in', ['user', 'tool'])|list", "ln|max", "ln|min", "ln|sum(start=10)",
                "messages|sum(attribute='role', start='') if false else 0", "ls|sort(reverse=true)", "s|center(12)",
                "ls|unique(case_sensitive=true)|list", "messages|map(attribute='role')|unique|list",
                "ln|map('string')|join('+')", "ls|select('equalto', 'a')|list", "d|items|map('first')|list"]) + " }}"
        if k == 8:
            return "{{ " + self.e_any(0) + " is " + self.choice([
                "sameas false", "sameas none", "lt 3", "ge 0", "in d", "in ls", "escaped", "gt 1", "le 2",
                "equalto s", "divisibleby(3)", "eq(none)", "ne(s)"]) + " }}"
        if k == 9:
            return "{{ " + self.choice([
                "'{} and {}'.format(s, n)", "'{0}{1}{0}'.format('a', 'b')", "'{x}!'.format(x=t)", "', '.join(ls)",
                "s.removeprefix('a')", "s.removesuffix('z')", "s.rsplit(None, 1)", "s.split(None, 1)", "s.islower()",
                "s.isupper()", "s.isspace()", "t.splitlines()", "s.rfind(' ')", "s.count(' ')", "s.title()",
                "'ab'.index('b')", "ls.index(ls[0]) if ls else -1", "ln.count(0)", "d.get('k')", "d.keys()|list|length"]) + " }}"
        if k == 10:
            return "{{ " + self.choice(["'\\x41\\u00e9\\101\\t|'", "'a' 'b' \"c\"", "\"it's\"", "'\\\\n'",
                                      "0x1F + 0o17 + 0b11 + 1_000", "1.5e3 + .5e1" if False else "1.5e3 + 2.5",
                                      "10 // -3", "-7 % 3", "2 ** -1", "7 / 2", "(1, 2) + (3,)", "[1] * 2",
                                      "1 < 2 < 3", "1 == 1.0 == true", "'a' < 'b' <= 'b'", "not 1 in [1]"]) + " }}"
        return self.tag(f"if {self.e_bool(d)}") + "{{ raise_exception('bad ' ~ " + self.e_str(0) + ") }}" + self.tag("endif")

    def template(self):
        return self.block(3, self.r.randint(1, 5))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--jsonl", required=True)
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # Python's SyntaxWarning on generated code like 1[0]
    rng = random.Random(args.seed)
    gen = Gen(rng)
    n_ok = n_err = n_syntax = 0
    with open(args.jsonl, "w", encoding="utf-8", newline="\n") as out:
        written = 0
        while written < args.n:
            tpl = gen.template()
            ctx = gen.context()
            try:
                compiled = ctu._compile_jinja_template(tpl)
            except Exception as exc:  # a syntax error the grammar produced: a case too
                n_syntax += 1
                rec = {"template": tpl, "context": ctx, "ok": False,
                       "error": {"type": type(exc).__name__, "message": str(exc)}}
            else:
                try:
                    text = compiled.render(tools=None, documents=None, add_generation_prompt=False, **ctx)
                    rec = {"template": tpl, "context": ctx, "ok": True, "text": text}
                    n_ok += 1
                except Exception as exc:
                    rec = {"template": tpl, "context": ctx, "ok": False,
                           "error": {"type": type(exc).__name__, "message": str(exc)}}
                    n_err += 1
            rec["context"] = {"tools": None, "documents": None, "add_generation_prompt": False, **ctx}
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
            written += 1
    print(f"{args.n} cases: {n_ok} rendered, {n_err} runtime errors, {n_syntax} syntax errors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
