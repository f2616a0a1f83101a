"""Per-spec results of a node e2e run, in the record format of
docs/conformance/*/results.json (plus the label filter, the images the
harness could not make, and what it had to change for a kubelet).

A spec that failed because an image it needs could not be made here is not a
failure of the kubelet and never a pass: its state is "not run" with the
image named.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benches.conformance.results import (
    FAILED,
    PASSED,
    SKIPPED,
    TIMEDOUT,
    RunResult,
    TestResult,
    _first_line,
    _hint,
)

__all__ = ["FAILED", "NOT_RUN", "PASSED", "SKIPPED", "TIMEDOUT", "NodeRunResult", "TestResult"]

NOT_RUN = "not run"
STATES = (PASSED, FAILED, TIMEDOUT, NOT_RUN, SKIPPED)


@dataclass
class NodeRunResult(RunResult):
    label_filter: str = ""
    images_unavailable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(STATES, 0)
        for t in self.tests:
            c[t.state] = c.get(t.state, 0) + 1
        c["total"] = len(self.tests)
        return c


def _spec_name(raw: str) -> str:
    """The spec's text: ginkgo appends its labels, "[sig-node, NodeConformance]";
    a single label only where the text already carries it as a tag."""
    name = raw.removeprefix("[It] ")
    m = re.search(r" \[([^\[\]]*)\]$", name)
    if m and (", " in m.group(1) or f"[{m.group(1)}]" in name[: m.start()]):
        name = name[: m.start()]
    return name


def _missing_image(text: str, unavailable: Iterable[str]) -> str:
    """The unavailable image a failed spec's pod could not pull, if its log
    shows one (the kubelet's event, or the container's waiting message)."""
    for ref in unavailable:
        if re.search(r"[Pp]ull(?:ing)? image \\*\"" + re.escape(ref), text):
            return ref
    return ""


def parse_junit(path: Path, unavailable: Iterable[str] = ()) -> list[TestResult]:
    """One TestResult per spec that was part of the run; suite-level nodes
    (BeforeSuite, ...) only when they failed, since then they explain the rest."""
    unavailable = list(unavailable)
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        raw = case.get("name", "")
        status = case.get("status", "")
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("message") == "skipped":
            continue  # filtered out by focus/skip/labels
        if status == "passed":
            state = PASSED
        elif status == "skipped" or skipped is not None:
            state = SKIPPED
        elif status in ("timedout", "interrupted"):
            state = TIMEDOUT
        else:
            state = FAILED
        if not raw.startswith("[It] ") and state != FAILED:
            continue
        msg = ""
        for el in (case.find("failure"), case.find("error")):
            if el is not None:
                msg = el.get("message") or el.text or ""
                break
        if state == SKIPPED and skipped is not None:
            msg = skipped.get("message", "") or msg
        failure = _first_line(msg) if state != PASSED else ""
        hint = _hint(msg) if state in (FAILED, TIMEDOUT) else ""
        if state in (FAILED, TIMEDOUT):
            log = "".join(el.text or "" for el in case if el.tag in ("system-err", "system-out"))
            image = _missing_image(msg + log, unavailable)
            if image:
                state, failure, hint = NOT_RUN, f"image {image} not available", ""
        out.append(
            TestResult(
                name=_spec_name(raw),
                state=state,
                duration_s=round(float(case.get("time", "0") or 0), 1),
                failure=failure,
                hint=hint,
            )
        )
    out.sort(key=lambda t: t.name)
    return out


# Why a spec fails here on both kubelets, or on ours only: read from the
# failures (name substring -> cause). Filled in from the runs' logs.
CAUSES: dict[str, str] = {}


def cause_of(t: TestResult) -> str:
    if t.state == NOT_RUN:
        return t.failure
    for key, cause in CAUSES.items():
        if key in t.name:
            return cause
    if t.hint:
        return t.hint
    return "not yet explained"


def annotate(run: NodeRunResult, upstream: NodeRunResult | None) -> None:
    states = {t.name: t.state for t in upstream.tests} if upstream else {}
    for t in run.tests:
        if run.kubelet == "ours" and upstream is not None:
            t.upstream = states.get(t.name, "")
        if t.state in (FAILED, TIMEDOUT, NOT_RUN):
            t.cause = cause_of(t)


def passed_where_upstream_passes(run: NodeRunResult) -> tuple[int, int]:
    base = [t for t in run.tests if t.upstream == PASSED]
    return sum(t.state == PASSED for t in base), len(base)


def load(path: Path) -> NodeRunResult | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    d.pop("counts", None)
    d.pop("passed_where_upstream_passes", None)
    tests = [TestResult(**t) for t in d.pop("tests", [])]
    return NodeRunResult(**d, tests=tests)


def write(run: NodeRunResult, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = run.to_json()
    if any(t.upstream for t in run.tests):
        data["passed_where_upstream_passes"] = list(passed_where_upstream_passes(run))
    (directory / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (directory / "results.md").write_text(markdown(run))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(run: NodeRunResult) -> str:
    c = run.counts()
    return (
        f"**{c[PASSED]} passed**, {c[FAILED]} failed, {c[TIMEDOUT]} timed out, "
        f"{c[NOT_RUN]} not run (image unavailable), {c[SKIPPED]} skipped, of {c['total']}"
    )


def markdown(run: NodeRunResult) -> str:
    who = "our" if run.kubelet == "ours" else "the upstream"
    lines = [
        f"# Node e2e (test/e2e_node): {who} kubelet",
        "",
        f"{run.date}, kubelet {run.kubelet_version or '?'}, harness at {run.source or '?'}, "
        f"{run.procs} ginkgo processes, {run.duration_s / 60:.0f} min. "
        f"Focus `{run.focus}`"
        + (f", skip `{run.skip}`" if run.skip else "")
        + (f", labels `{run.label_filter}`" if run.label_filter else "")
        + ".",
        "",
        summary(run) + ".",
    ]
    has_upstream = any(t.upstream for t in run.tests)
    if has_upstream:
        ok, base = passed_where_upstream_passes(run)
        lines += ["", f"Passed where the upstream kubelet passes: **{ok} of {base}**."]
    if run.error:
        lines += ["", f"**The run failed:** {_cell(run.error)}"]
    for note in run.notes:
        lines += ["", f"Harness note: {_cell(note)}"]
    header, rule = "| spec | result |", "|---|---|"
    if has_upstream:
        header, rule = header + " upstream |", rule + "---|"
    lines += ["", header + " cause | first line of the failure |", rule + "---|---|"]
    order = {FAILED: 0, TIMEDOUT: 0, NOT_RUN: 1, SKIPPED: 2, PASSED: 3}
    for t in sorted(run.tests, key=lambda t: (order.get(t.state, 0), t.name)):
        row = f"| {_cell(t.name)} | {t.state} |"
        if has_upstream:
            row += f" {t.upstream or '-'} |"
        lines.append(row + f" {_cell(t.cause)} | {_cell(t.failure)} |")
    return "\n".join(lines) + "\n"


DOC_BEGIN = "<!-- node-e2e results: generated by python -m benches.node_e2e, do not edit -->"
DOC_END = "<!-- end of node-e2e results -->"


def doc_table(out: Path) -> str:
    """Counts of every run recorded under out (one row per results.json), and
    the specs upstream passes that ours does not."""
    rows = [
        "| run | kubelet | date | passed | failed | timed out | not run | skipped | of | passed where upstream passes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    diffs: list[str] = []
    for path in sorted(out.rglob("results.json")):
        run = load(path)
        if run is None:
            continue
        c = run.counts()
        ok, base = passed_where_upstream_passes(run)
        where = str(path.parent.relative_to(out))
        rows.append(
            f"| `{where}` | {run.kubelet} | {run.date} | {c[PASSED]} | {c[FAILED]} | {c[TIMEDOUT]} "
            f"| {c[NOT_RUN]} | {c[SKIPPED]} | {c['total']} | "
            + (f"{ok} of {base}" if base else "-")
            + " |"
        )
        for t in run.tests:
            if t.upstream == PASSED and t.state != PASSED:
                diffs.append(f"| {_cell(t.name)} | {t.state} | {_cell(t.cause)} |")
    text = "\n".join(rows)
    if diffs:
        text += "\n\nSpecs the upstream kubelet passes and ours does not:\n\n"
        text += "| spec | ours | cause |\n|---|---|---|\n" + "\n".join(diffs)
    return text


def update_doc(doc: Path, out: Path) -> None:
    """Rewrites the generated block of doc (kept in place between its markers)."""
    try:
        text = doc.read_text()
    except FileNotFoundError:
        return
    if DOC_BEGIN not in text or DOC_END not in text:
        return
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    doc.write_text(f"{head}{DOC_BEGIN}\n{doc_table(out)}\n{DOC_END}{tail}")
