"""The configuration account: every upstream field, flag and gate is in one of
three states, each implemented one names a test that exists, and
docs/configuration.md is what the account renders."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kubelet.apis.config import account, account_doc, loader, upstream

ROOT = Path(__file__).resolve().parents[3]


def test_every_upstream_name_has_a_state() -> None:
    parsed, problems = account.parse(account.ACCOUNT.read_text())
    problems += account.completeness_problems(parsed)
    assert problems == []


def test_a_missing_or_stale_line_is_found() -> None:
    parsed, _ = account.parse(account.ACCOUNT.read_text())
    parsed.pop(("gate", "KubeletPSI"))
    parsed[("field", "noSuchField")] = account.Entry("field", "noSuchField", "warned", "x", 0)
    problems = account.completeness_problems(parsed)
    assert "gate KubeletPSI: in none of the states implemented/warned/refused" in problems
    assert "field noSuchField: listed in account.tsv but not upstream" in problems
    _, bad = account.parse("field\tx\tmaybe\ty\nflag\t--a\n")
    assert any("unknown state 'maybe'" in p for p in bad)
    assert any("want kind<TAB>name" in p for p in bad)


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test_"
        ):
            out.add(node.name)
    return out


def test_every_implemented_line_names_a_test_that_exists() -> None:
    missing = []
    cache: dict[str, set[str]] = {}
    for e in account.entries().values():
        if e.state != "implemented":
            continue
        m = re.fullmatch(r"(tests/[\w/]+\.py)::(test_\w+)(\[[^\]]+\])?", e.evidence)
        if m is None:
            missing.append(f"{e.kind} {e.name}: evidence {e.evidence!r} is not a pytest node id")
            continue
        path = ROOT / m.group(1)
        if not path.exists():
            missing.append(f"{e.kind} {e.name}: no file {m.group(1)}")
            continue
        funcs = cache.setdefault(m.group(1), _test_functions(path))
        if m.group(2) not in funcs:
            missing.append(f"{e.kind} {e.name}: no test {m.group(2)} in {m.group(1)}")
    assert missing == []


def test_docs_are_rendered_from_the_account() -> None:
    # Regenerate with: python -m kubelet.apis.config.account --write-docs docs/configuration.md
    assert (ROOT / "docs" / "configuration.md").read_text() == account_doc.render()


def test_generated_lists_name_their_module_versions() -> None:
    src = upstream.source()
    assert src["k8s.io/kubernetes"] == "v1.34.4"
    assert src["k8s.io/kubelet"] == src["k8s.io/component-base"] == "v0.34.4"
    # a few facts of v1.34 read from the Go sources, not typed here
    f = upstream.fields()
    assert f["authentication.webhook.cacheTTL"].default == "2m0s"
    assert f["podPidsLimit"].default == -1
    assert f["syncFrequency"].default_when == "zero"
    assert f["staticPodPath"].relative_path
    flags = upstream.flags()
    assert flags["max-pods"].field == "maxPods" and "--config flag" in flags["max-pods"].deprecated
    assert flags["runtime-cgroups"].field == "" and flags["runtime-cgroups"].group == "instance"
    g = upstream.gates()
    assert g["KubeletPSI"].stage == "BETA" and g["KubeletPSI"].node_reads


def test_warned_fields_are_logged_only_off_their_default() -> None:
    defaults = {p: f.default for p, f in upstream.fields().items()}
    doc: dict[str, object] = {}
    for path, value in defaults.items():
        holder = doc
        *parents, last = path.split(".")
        for part in parents:
            holder = holder.setdefault(part, {})  # type: ignore[assignment]
        holder[last] = value
    warnings, problems = account.field_report(doc)
    assert (warnings, problems) == ([], [])
    doc["hairpinMode"] = "hairpin-veth"
    doc["maxOpenFiles"] = 0  # kubeadm's zero: defaulted to 1000000 first
    warnings, _ = account.field_report(loader.set_defaults(doc, from_file=True))
    assert len(warnings) == 1
    assert warnings[0].startswith("config field hairpinMode='hairpin-veth' is not supported")
