"""Figures in Markdown, tied to their records (benches/records.py).

A figure is never typed by hand: it sits in a generated block whose template,
kept in an HTML comment just above, names the record and the field:

    <!-- figures d=density-2026-11-22
    | startup p99 at 1,000 pods | {d.figures[kubelet=ours,n=1000,relist_period_s=0.25].startup_p99_s | .2f} s |
    -->
    | startup p99 at 1,000 pods | 0.48 s |
    <!-- /figures -->

A block may keep its template in a file instead, so the Markdown around it
stays short (the README does): `<!-- figures use=NAME -->` renders
benches/templates/NAME.md, whose first line names the records.

`python -m benches.report --write` renders every block from the records;
`--check` fails when a block differs from its rendering (a figure edited by
hand, a record changed or gone), when a record lacks its command, commit, date
or machine, and when a file that publishes figures (FIGURE_DOCS) has a
measurement outside any block: a number with a unit (ms, s, MiB, core, x, %,
...) that is neither in a code span nor listed as a setting in the file's
`<!-- settings: 250 ms, 50 pods/s -->` comment.

Placeholders: `{EXPR}` or `{EXPR | FORMAT}` (a Python format spec). EXPR is
arithmetic (+ - * / and parentheses) over numbers and references. A reference
starts with a record's alias and walks into it: `.key`, `["any key"]`, `[3]`
(a list index), `[0:10]` (a slice) or `[k=v,k2=v2]` (the one list element whose fields match);
`.key?` is null (rendered "-") where the key is absent.
`ALIAS@link` is the record file's path relative to the Markdown file.
`{{` and `}}` are literal braces. A null value renders as "-". Formats of
their own: `count` (the length of a list), `join` (its items, comma-separated),
`loadavg` (the load averages of an `uptime` line), `short` (a commit's
7 hex digits, with `-dirty` when the record says so).

Rows of a list: the template lines between `{each ROW in EXPR}` and `{end}`
(each on a line of its own) are rendered once for every element of the list
EXPR names, in the record's order, with ROW referring to the element; a last
`[k=v]` in EXPR keeps every element that matches.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches import records

REPO = records.REPO

# Files that publish measured figures: every measurement in them must come from
# a block. (Blocks are rendered and checked in every Markdown file.)
FIGURE_DOCS = (
    "README.md",
    "docs/benchmarks.md",
    "docs/conformance.md",
    "docs/drills.md",
    "docs/ci-time.md",
)

BLOCK = re.compile(
    r"<!-- figures (?:use=(?P<use>[\w.-]+) -->\n|(?P<refs>[^\n]*)\n(?P<template>.*?)-->\n)"
    r"(?P<body>.*?)<!-- /figures -->",
    re.S,
)
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(?P<expr>[^{}|]+)(?:\|(?P<fmt>[^{}]*))?\}")
TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?(?:e-?\d+)?)|(?P<ident>[A-Za-z_]\w*)"
    r"|(?P<key>\.[A-Za-z0-9_]\w*\??)|(?P<bracket>\[[^\]]*\])|(?P<at>@\w+)|(?P<op>[-+*/()]))"
)
# A measurement: a number with a unit.
MEASUREMENT = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|us|µs|min|h|KiB|MiB|GiB|MB/s|cores?|x|%)(?![\w/])"
)
SETTINGS = re.compile(r"<!-- settings: (.*?) -->", re.S)


class FigureError(Exception):
    """A template that cannot be rendered (bad reference, missing record)."""


@dataclass
class Context:
    records: dict[str, dict[str, Any]]  # alias -> record
    names: dict[str, str]  # alias -> record name
    md_dir: Path


def _select(value: Any, inner: str, where: str, many: bool = False) -> Any:
    inner = inner.strip()
    if re.fullmatch(r"-?\d+", inner):
        return value[int(inner)]
    if re.fullmatch(r"-?\d*:-?\d*", inner):  # a slice of a list
        a, b = (int(x) if x else None for x in inner.split(":"))
        return value[a:b]
    if inner[:1] in "\"'":
        return value[inner.strip("\"'")]
    want = dict(pair.split("=", 1) for pair in inner.split(","))

    def matches(item: Any) -> bool:
        for k, v in want.items():
            got = item.get(k.strip()) if isinstance(item, dict) else None
            v = v.strip()
            try:
                if got is None or float(got) != float(v):
                    return False
            except (TypeError, ValueError):
                if str(got) != v:
                    return False
        return True

    found = [item for item in value if matches(item)]
    if many:
        return found
    if len(found) != 1:
        raise FigureError(f"{where}: [{inner}] matches {len(found)} elements, not 1")
    return found[0]


class _Parser:
    """Recursive descent over the tokens of one placeholder expression."""

    def __init__(self, expr: str, ctx: Context, many: bool = False) -> None:
        self.expr, self.ctx, self.pos, self.many = expr, ctx, 0, many
        self.tokens: list[tuple[str, str]] = []
        while self.pos < len(expr.rstrip()):
            m = TOKEN.match(expr, self.pos)
            if not m or m.end() == self.pos:
                raise FigureError(f"cannot read {expr!r} at {expr[self.pos :]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            self.pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.i += 1
        return tok

    def parse(self) -> Any:
        v = self.sum()
        if self.peek()[0] != "end":
            raise FigureError(f"{self.expr!r}: unexpected {self.peek()[1]!r}")
        return v

    def sum(self) -> Any:
        v = self.product()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            w = self.product()
            v = None if v is None or w is None else (v + w if op == "+" else v - w)
        return v

    def product(self) -> Any:
        v = self.factor()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            w = self.factor()
            v = None if v is None or w is None else (v * w if op == "*" else v / w)
        return v

    def factor(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return float(text) if "." in text or "e" in text else int(text)
        if (kind, text) == ("op", "("):
            v = self.sum()
            if self.take() != ("op", ")"):
                raise FigureError(f"{self.expr!r}: missing )")
            return v
        if (kind, text) == ("op", "-"):
            v = self.factor()
            return None if v is None else -v
        if kind == "ident":
            return self.reference(text)
        raise FigureError(f"{self.expr!r}: unexpected {text!r}")

    def reference(self, alias: str) -> Any:
        if alias not in self.ctx.records:
            raise FigureError(f"{self.expr!r}: no record aliased {alias!r}")
        value: Any = self.ctx.records[alias]
        where = f"{self.ctx.names[alias]}"
        while self.peek()[0] in ("key", "bracket", "at"):
            kind, text = self.take()
            try:
                if kind == "key" and text.endswith("?"):  # optional: null when absent
                    value = value.get(text[1:-1]) if isinstance(value, dict) else None
                    where += text
                elif kind == "key":
                    value = value[text[1:]]
                    where += text
                elif kind == "bracket":
                    last = self.many and self.peek()[0] == "end"
                    value = _select(value, text[1:-1], where, last)
                    where += text
                elif text == "@link":
                    target = records.RESULTS / f"{self.ctx.names[alias]}.json"
                    return os.path.relpath(target, self.ctx.md_dir)
                else:
                    raise FigureError(f"{self.expr!r}: unknown {text}")
            except (KeyError, IndexError, TypeError) as err:
                raise FigureError(f"{where}: no {text} ({err!r})") from None
        return value


def render_value(value: Any, fmt: str | None) -> str:
    if value is None:
        return "-"
    spec = (fmt or "").strip()
    if spec == "count":
        return str(len(value))
    if spec == "join":
        return ", ".join(map(str, value))
    if spec == "short":  # a commit: 7 hex digits, and -dirty when the tree was
        head, _, dirty = str(value).partition("-")
        return head[:7] + (f"-{dirty}" if dirty else "")
    if spec == "loadavg":  # from `uptime` output
        return str(value).rsplit("load average:", 1)[-1].strip().replace(", ", " / ")
    if not spec:
        return (
            f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
        )
    return format(value, spec)


EACH = re.compile(r"\{each (?P<alias>[A-Za-z_]\w*) in (?P<expr>[^{}]+)\}")


def render(template: str, ctx: Context) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        return render_value(_Parser(m.group("expr"), ctx).parse(), m.group("fmt"))

    out: list[str] = []
    lines = template.split("\n")
    i = 0
    while i < len(lines):
        m = EACH.fullmatch(lines[i].strip())
        if not m:
            out.append(PLACEHOLDER.sub(one, lines[i]))
            i += 1
            continue
        try:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "{end}")
        except StopIteration:
            raise FigureError(f"{lines[i]!r} without its {{end}}") from None
        body = "\n".join(lines[i + 1 : end])
        alias, expr = m.group("alias"), m.group("expr")
        root = expr.strip().split(".")[0].split("[")[0]
        for item in _Parser(expr, ctx, many=True).parse():
            names = {**ctx.names, alias: ctx.names.get(root, alias)}
            out.append(render(body, Context({**ctx.records, alias: item}, names, ctx.md_dir)))
        i = end + 1
    return "\n".join(out)


def _context(refs: str, md_dir: Path, cache: dict[str, dict[str, Any]]) -> Context:
    ctx = Context({}, {}, md_dir)
    for ref in refs.split():
        alias, _, name = ref.rpartition("=")
        alias = alias or "r"
        if name not in cache:
            try:
                cache[name] = records.load(name)
            except FileNotFoundError:
                raise FigureError(f"no record benches/results/{name}.json") from None
        ctx.records[alias], ctx.names[alias] = cache[name], name
    return ctx


@dataclass
class Outcome:
    text: str  # the file with every block rendered
    problems: list[str]
    used: set[str]  # record names the file's blocks read


def _template_file(name: str) -> tuple[str, str]:
    """benches/templates/<name>.md: the references on its first line, the template after."""
    path = REPO / "benches" / "templates" / f"{name}.md"
    try:
        refs, _, template = path.read_text().partition("\n")
    except FileNotFoundError:
        raise FigureError(f"no template {os.path.relpath(path, REPO)}") from None
    return refs, template


def process(path: Path, cache: dict[str, dict[str, Any]] | None = None) -> Outcome:
    """Render every block of one Markdown file and list what is wrong in it."""
    cache = {} if cache is None else cache
    original = path.read_text()
    problems: list[str] = []
    used: set[str] = set()
    rel = os.path.relpath(path, REPO)

    def block(m: re.Match[str]) -> str:
        line = original.count("\n", 0, m.start()) + 1
        try:
            refs, template = m.group("refs"), m.group("template")
            if m.group("use"):
                refs, template = _template_file(m.group("use"))
            ctx = _context(refs, path.parent, cache)
            body = render(template, ctx)
        except FigureError as err:
            problems.append(f"{rel}:{line}: {err}")
            return m.group(0)
        used.update(ctx.names.values())
        if body != m.group("body"):
            problems.append(
                f"{rel}:{line}: figures differ from their records (--write renders them)"
            )
        return m.group(0)[: m.start("body") - m.start()] + body + "<!-- /figures -->"

    text = BLOCK.sub(block, original)
    if rel in FIGURE_DOCS:
        problems += [f"{rel}: {p}" for p in stray_measurements(original)]
    return Outcome(text, problems, used)


def _strip(text: str, pattern: str, keep_lines: bool = True) -> str:
    sub: Callable[[re.Match[str]], str] = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731
    return re.sub(pattern, sub if keep_lines else "", text, flags=re.S)


def stray_measurements(text: str) -> list[str]:
    """Measurements outside blocks, code and the file's listed settings."""
    settings: set[str] = set()
    for m in SETTINGS.finditer(text):
        settings.update(s.strip().replace(" ", "") for s in m.group(1).split(","))
    plain = _strip(text, r"<!-- figures .*?<!-- /figures -->")
    plain = _strip(plain, r"```.*?```")
    plain = _strip(plain, r"<!--.*?-->")
    plain = re.sub(r"`[^`\n]*`", "", plain)
    plain = re.sub(r"\]\([^)\s]*\)", "]", plain)  # link targets
    out = []
    for n, line in enumerate(plain.split("\n"), 1):
        for m in MEASUREMENT.finditer(line):
            if m.group(0).replace(" ", "") not in settings:
                out.append(f"line {n}: {m.group(0)!r} is not from a record (nor a listed setting)")
    return out


def markdown_files() -> list[Path]:
    docs = sorted((REPO / "docs").rglob("*.md")) if (REPO / "docs").is_dir() else []
    return [p for p in (REPO / "README.md", *docs) if p.exists()]


def check_records() -> list[str]:
    out = []
    for path in sorted(records.RESULTS.glob("*.json")):
        try:
            out += records.problems(records.load(path.stem), path.stem)
        except ValueError as err:
            out.append(f"{path.stem}: not JSON: {err}")
    return out


def run(write: bool) -> list[str]:
    """Render (and with `write`, rewrite) every file; the problems found."""
    cache: dict[str, dict[str, Any]] = {}
    problems = check_records()
    for path in markdown_files():
        outcome = process(path, cache)
        if write and outcome.text != path.read_text():
            path.write_text(outcome.text)
            print(f"rendered {os.path.relpath(path, REPO)}")
            outcome = process(path, cache)
        problems += outcome.problems
    return problems
