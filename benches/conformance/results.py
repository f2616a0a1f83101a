"""Reading a ginkgo JUnit report into per-test results, classifying the
failures of our kubelet by cause, and writing results.json / results.md."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubelet.testing.images import E2E_UNAVAILABLE

# Ginkgo's states, folded: "timedout" stays apart from "failed" because a hang
# is a different finding from a wrong answer.
PASSED, FAILED, SKIPPED, TIMEDOUT = "passed", "failed", "skipped", "timedout"


@dataclass
class TestResult:
    name: str
    state: str
    duration_s: float
    failure: str = ""  # first line of the failure message
    cause: str = ""  # why ours failed (classify()); empty when it passed
    upstream: str = ""  # the control's state for the same test, when known
    hint: str = ""  # a known cause found deeper in the failure message (HINTS)


@dataclass
class RunResult:
    kubelet: str
    date: str
    duration_s: float
    procs: int
    focus: str
    skip: str
    kubelet_version: str = ""
    source: str = ""  # the repository's commit at the start (-dirty: with uncommitted edits)
    error: str = ""  # the run itself went wrong (kubelet crashed, suite timed out)
    tests: list[TestResult] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = {PASSED: 0, FAILED: 0, SKIPPED: 0, TIMEDOUT: 0}
        for t in self.tests:
            c[t.state] = c.get(t.state, 0) + 1
        c["total"] = len(self.tests)
        return c

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"] = self.counts()
        return d


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


# Causes that only the full failure text shows (the first line is often a
# timeout); each is a fact about this machine, not about either kubelet.
HINTS: list[tuple[str, str]] = [
    (r"^A suite timeout occurred", "hung: still running when the suite timeout struck"),
    # Seen when two kubelets shared a cgroup root: each removed the other's pod
    # cgroups as orphans (the harness now gives each run its own root).
    (r"runc create failed: .*cpuset", "runc: the pod cgroup vanished (another kubelet's cleanup)"),
]


def _hint(msg: str) -> str:
    flat = " ".join(msg.split())
    for pattern, cause in HINTS:
        if re.search(pattern, flat):
            return cause
    return ""


def parse_junit(path: Path) -> list[TestResult]:
    """One TestResult per spec; ginkgo's suite-level nodes (BeforeSuite, ...)
    are kept only when they failed, since then they explain everything else."""
    root = ET.parse(path).getroot()
    out = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        status = case.get("status", "")
        is_spec = name.startswith("[It] ")
        # Ginkgo appends the spec's labels, "[sig-node, NodeConformance, ...]".
        name = re.sub(r" \[[^\[\]]*, [^\[\]]*\]$", "", name.removeprefix("[It] "))
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("message") == "skipped":
            continue  # filtered out by --focus/--skip: not part of this run
        if status == "passed":
            state = PASSED
        elif status == "skipped" or case.find("skipped") is not None:
            state = SKIPPED
        elif status in ("timedout", "interrupted"):
            state = TIMEDOUT  # its own timeout, or the suite's ran out while it ran
        else:
            state = FAILED
        if not is_spec and state != FAILED:
            continue
        msg = ""
        for el in (failure, error):
            if el is not None:
                msg = el.get("message") or el.text or ""
                break
        if state == SKIPPED and skipped is not None:
            msg = skipped.get("message", "") or msg
        out.append(
            TestResult(
                name=name,
                state=state,
                duration_s=round(float(case.get("time", "0") or 0), 1),
                failure=_first_line(msg) if state != PASSED else "",
                hint=_hint(msg) if state in (FAILED, TIMEDOUT) else "",
            )
        )
    out.sort(key=lambda t: t.name)
    return out


# Causes of our failures, by what the test exercises (first match wins).
# Missing features have their own issues; "kubelet bug" is what remains once
# the test's feature is implemented and it still fails, so it is set by hand
# in OVERRIDES after reading the failure.
RULES: list[tuple[str, str]] = [
    (r"Lifecycle Hook", "lifecycle hooks"),
    (r"remote command execution", "exec (kubelet port)"),
    (r"Ephemeral Containers", "ephemeral containers"),
    (r"termination message", "termination message"),
    (r"hostAliases|/etc/hosts", "/etc/hosts"),
    (r"activeDeadlineSeconds", "activeDeadlineSeconds"),
    (r"environment variables for services", "service env"),
    (r"Sysctls", "sysctls"),
    (r"Variable Expansion .*(volume|subpath)", "volumes (subPathExpr)"),
    (r"\[sig-storage\]|[Vv]olume|subpath|Projected", "volumes"),
    (r"Variable Expansion", "env ($(VAR) expansion)"),
    (r"environment|env var|as env|via the environment", "env (valueFrom/envFrom)"),
    (r"InitContainer", "init containers"),
]

# Tests whose cause is not what their name suggests (read from the failures).
OVERRIDES: dict[str, str] = {}


# Why the upstream kubelet fails a test here: this machine, not a kubelet.
# Checked: `env data-1=x busybox sh -c env` prints no data-1 with Debian's
# busybox (ash rebuilds the environment from its own variables).
_BUSYBOX_ENV = "test image: Debian busybox sh drops env names like data-1"
MACHINE: dict[str, str] = {
    "Secrets should be consumable via the environment": _BUSYBOX_ENV,
    "ConfigMap should be consumable via the environment": _BUSYBOX_ENV,
    "as environment variable names": _BUSYBOX_ENV,
}


def classify(t: TestResult) -> str:
    """The cause of a failure of ours (after merge_upstream)."""
    msg = t.failure
    if any(ref in msg for ref in E2E_UNAVAILABLE):
        return "image unavailable"
    if t.upstream in (FAILED, TIMEDOUT):
        return "fails on upstream too: " + machine_cause(t)
    if t.hint:
        return t.hint
    for key, cause in OVERRIDES.items():
        if key in t.name:
            return cause
    for pattern, cause in RULES:
        if re.search(pattern, t.name):
            return cause
    return "kubelet bug (unclassified)"


def machine_cause(t: TestResult) -> str:
    """The cause of a failure of the upstream kubelet, the control."""
    if any(ref in t.failure for ref in E2E_UNAVAILABLE):
        return "image unavailable"
    if t.hint:
        return t.hint
    for key, cause in MACHINE.items():
        if key in t.name:
            return cause
    return "not yet explained"


def merge_upstream(ours: RunResult, upstream: RunResult) -> None:
    states = {t.name: t.state for t in upstream.tests}
    for t in ours.tests:
        t.upstream = states.get(t.name, "")


def passed_where_upstream_passes(ours: RunResult) -> tuple[int, int]:
    base = [t for t in ours.tests if t.upstream == PASSED]
    return sum(t.state == PASSED for t in base), len(base)


def load(path: Path) -> RunResult | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    d.pop("counts", None)
    d.pop("passed_where_upstream_passes", None)
    tests = [TestResult(**t) for t in d.pop("tests", [])]
    return RunResult(**d, tests=tests)


def write(run: RunResult, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = run.to_json()
    if any(t.upstream for t in run.tests):
        ok, base = passed_where_upstream_passes(run)
        data["passed_where_upstream_passes"] = [ok, base]
    (directory / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (directory / "results.md").write_text(markdown(run))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _title(run: RunResult) -> str:
    # The storage harness (benches/storage) writes its records in this format.
    return "Storage suites" if run.focus.startswith("External.Storage") else "Node conformance"


def markdown(run: RunResult) -> str:
    c = run.counts()
    lines = [
        f"# {_title(run)}: {'our' if run.kubelet == 'ours' else 'the upstream'} kubelet",
        "",
        f"{run.date}, kubelet {run.kubelet_version or '?'}"
        + (f" at {run.source}" if run.source and run.kubelet == "ours" else "")
        + f", {run.procs} ginkgo processes, "
        f"{run.duration_s / 60:.0f} min. Focus `{run.focus}`"
        + (f", skip `{run.skip}`" if run.skip else "")
        + ".",
        "",
        f"**{c[PASSED]} passed**, {c[FAILED]} failed, {c[TIMEDOUT]} timed out, "
        f"{c[SKIPPED]} skipped, of {c['total']}.",
    ]
    has_upstream = any(t.upstream for t in run.tests)
    if has_upstream:
        ok, base = passed_where_upstream_passes(run)
        lines += ["", f"Passed where the upstream kubelet passes: **{ok} of {base}**."]
    if run.error:
        lines += ["", f"**The run failed:** {_cell(run.error)}"]
    failed = [t for t in run.tests if t.state in (FAILED, TIMEDOUT)]
    if failed and run.kubelet == "ours":
        by_cause: dict[str, int] = {}
        for t in failed:
            by_cause[t.cause] = by_cause.get(t.cause, 0) + 1
        lines += ["", "| cause of failure | tests |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(by_cause.items(), key=lambda kv: -kv[1])]
    header = "| test | result |"
    rule = "|---|---|"
    if has_upstream:
        header += " upstream |"
        rule += "---|"
    header += " cause | first line of the failure |"
    rule += "---|---|"
    lines += ["", header, rule]
    order = {FAILED: 0, TIMEDOUT: 0, SKIPPED: 1, PASSED: 2}
    for t in sorted(run.tests, key=lambda t: (order.get(t.state, 0), t.name)):
        row = f"| {_cell(t.name)} | {t.state} |"
        if has_upstream:
            row += f" {t.upstream or '-'} |"
        row += f" {_cell(t.cause)} | {_cell(t.failure)} |"
        lines.append(row)
    return "\n".join(lines) + "\n"
