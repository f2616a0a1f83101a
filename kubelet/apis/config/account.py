"""The configuration account: what this kubelet does with every upstream
KubeletConfiguration field, flag and feature gate.

data/account.tsv holds one line per name, `kind<TAB>name<TAB>state<TAB>evidence`:

- kind: `field` (a JSON path of the v1beta1 type), `flag` (a flag that writes
  no config field; flags that do follow their field's line) or `gate`;
- state: `implemented` (evidence: the pytest node id of a test that proves
  it), `warned` (accepted; a log line at start names it when set to something
  other than its default; evidence: why not yet) or `refused` (exit 1 naming
  it when set to something other than its default; evidence: why running
  without it would be unsafe or misleading).

The upstream lists come from upstream.py (generated); a test fails when a
name is in neither, and docs/configuration.md is rendered from both here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubelet.apis.config import upstream
from kubelet.util.duration import parse_duration

ACCOUNT = upstream.DATA / "account.tsv"
KINDS = ("field", "flag", "gate")
STATES = ("implemented", "warned", "refused")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    state: str
    evidence: str
    line: int


def parse(text: str) -> tuple[dict[tuple[str, str], Entry], list[str]]:
    """The entries of an account file and the problems with its lines."""
    entries: dict[tuple[str, str], Entry] = {}
    problems = []
    for no, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = raw.split("\t")
        if len(parts) != 4 or not all(p.strip() for p in parts):
            problems.append(f"account.tsv:{no}: want kind<TAB>name<TAB>state<TAB>evidence")
            continue
        kind, name, state, evidence = (p.strip() for p in parts)
        if kind not in KINDS:
            problems.append(f"account.tsv:{no}: unknown kind {kind!r}")
        if state not in STATES:
            problems.append(f"account.tsv:{no}: unknown state {state!r}")
        if (kind, name) in entries:
            problems.append(f"account.tsv:{no}: {kind} {name} listed twice")
        entries[(kind, name)] = Entry(kind, name, state, evidence, no)
    return entries, problems


@functools.cache
def entries() -> dict[tuple[str, str], Entry]:
    parsed, _ = parse(ACCOUNT.read_text())
    return parsed


def upstream_names() -> dict[str, list[str]]:
    """Every name the account must cover, by kind."""
    return {
        "field": sorted(upstream.fields()),
        "flag": sorted(f"--{f.name}" for f in upstream.flags().values() if not f.field),
        "gate": sorted(upstream.gates()),
    }


def completeness_problems(account: Mapping[tuple[str, str], Entry]) -> list[str]:
    """Upstream names the account misses, and lines naming nothing upstream has."""
    problems = []
    names = upstream_names()
    for kind, wanted in names.items():
        for name in wanted:
            if (kind, name) not in account:
                problems.append(f"{kind} {name}: in none of the states {'/'.join(STATES)}")
    for kind, name in account:
        if name not in names.get(kind, ()):
            problems.append(f"{kind} {name}: listed in account.tsv but not upstream")
    return problems


def state(kind: str, name: str) -> Entry:
    return entries()[(kind, name)]


def flag_state(name: str) -> Entry:
    """A flag's line: its own, or its field's."""
    fl = upstream.flags()[name]
    return state("field", fl.field) if fl.field else state("flag", f"--{name}")


# ---- values against upstream defaults ----


def value_at(doc: Mapping[str, Any], path: str) -> Any:
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _normal(value: Any, typ: str) -> Any:
    """Values compared as Go would see them after defaulting: unset, empty and
    zero are one value; durations by length."""
    if typ in ("duration", "duration_or_ns") and value is not None:
        try:
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = float(value) / (1e9 if typ == "duration_or_ns" else 1)
            else:
                value = parse_duration(str(value))
        except ValueError:
            return value
    if typ == "quantity" and value in ("0", 0):
        return None
    if value is None or value is False or value in ("", [], {}):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return None
    return value


def is_default(path: str, value: object) -> bool:
    fld = upstream.fields()[path]
    return bool(_normal(value, fld.type) == _normal(fld.default, fld.type))


def field_report(doc: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(warnings, problems) for warned and refused fields that the effective
    configuration sets to something other than upstream's default."""
    warnings, problems = [], []
    for (kind, path), e in sorted(entries().items()):
        if kind != "field" or e.state == "implemented":
            continue
        value = value_at(doc, path)
        if is_default(path, value):
            continue
        if e.state == "warned":
            warnings.append(
                f"config field {path}={_show(value)} is not supported by this kubelet yet: "
                f"{e.evidence}"
            )
        else:
            problems.append(f"config field {path}={_show(value)} is refused: {e.evidence}")
    return warnings, problems


def flag_report(given: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(warnings, problems) for flags without a config field, by name -> raw
    value as given (flags with a field are judged through the field)."""
    warnings, problems = [], []
    for name, raw in sorted(given.items()):
        fl = upstream.flags().get(name)
        if fl is None or fl.field:
            continue
        e = state("flag", f"--{name}")
        if e.state == "implemented" or raw == fl.default:
            continue
        if e.state == "warned":
            warnings.append(
                f"flag --{name}={raw} is not supported by this kubelet yet: {e.evidence}"
            )
        else:
            problems.append(f"flag --{name}={raw} is refused: {e.evidence}")
    return warnings, problems


def gate_report(values: Mapping[str, bool], explicit: Iterable[str]) -> tuple[list[str], list[str]]:
    """(warnings, problems) for warned and refused gates: one warning for each
    such gate set to something other than its default, one line naming the
    gates enabled by default that this kubelet does not act on, and a problem
    for each refused gate that is enabled."""
    explicit = set(explicit)
    warnings, problems, by_default = [], [], []
    for name, g in sorted(upstream.gates().items()):
        e = entries().get(("gate", name))
        if e is None or e.state == "implemented":
            continue
        on = values.get(name, g.default)
        if e.state == "refused" and on != g.default:
            problems.append(f"feature gate {name}={str(on).lower()} is refused: {e.evidence}")
        elif on != g.default or (name in explicit and on):
            warnings.append(
                f"feature gate {name}={str(on).lower()} is not supported by this kubelet yet: "
                f"{e.evidence}"
            )
        elif on:
            by_default.append(name)
    if by_default:
        warnings.append(
            "feature gates enabled by default that this kubelet does not implement yet "
            f"(see docs/configuration.md): {', '.join(by_default)}"
        )
    return warnings, problems


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value).replace("'", '"')
    return text if len(text) <= 80 else text[:77] + "..."


def counts() -> dict[str, dict[str, int]]:
    out = {k: dict.fromkeys(STATES, 0) for k in KINDS}
    for (kind, _), e in entries().items():
        out[kind][e.state] += 1
    return out
