"""Feature gates as upstream's registry (component-base featuregate) handles
them, with every gate the v1.34 kubelet binary registers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubelet.apis.config import account, upstream
from kubelet.cmd.kubelet import UsageError, build_server
from kubelet.features import Feature, FeatureGate, gate_problems, gate_set_warnings

ROOT = Path(__file__).resolve().parents[3]


def _settable(name: str) -> bool:
    g = upstream.gates()[name]
    return not g.locked and g.stage != "PRE-ALPHA"


def test_every_upstream_gate_is_accepted_with_its_default() -> None:
    gates = upstream.gates()
    assert len(gates) > 200 and "KubeletPSI" in gates
    fg = FeatureGate()
    for name, g in gates.items():
        assert fg.value(name) is g.default, name
    # every gate can be set to its default through the command line at once
    setting = ",".join(
        f"{n}={str(g.default).lower()}"
        for n, g in gates.items()
        if n != "AllAlpha" and n != "AllBeta"
    )
    s, _, _ = build_server([f"--feature-gates={setting}", "--authorization-mode=AlwaysAllow"])
    assert s is not None and FeatureGate(s.config.feature_gates).value("KubeletPSI") is True


def test_kubelet_psi_from_a_config_file_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "featureGates:\n  KubeletPSI: true\n  NodeSwap: true\n"
    )
    s, warnings, _ = build_server(["--config", str(cfg)])
    assert s is not None
    psi = [w for w in warnings if "KubeletPSI" in w and w.startswith("feature gate")]
    assert psi == [
        "feature gate KubeletPSI=true is not supported by this kubelet yet: "
        + account.state("gate", "KubeletPSI").evidence
    ]
    # setting a GA gate logs upstream's warning
    assert (
        "Setting GA feature gate NodeSwap=true. It will be removed in a future release." in warnings
    )


def test_unknown_locked_and_deprecated_gates_as_upstream() -> None:
    locked = next(n for n, g in upstream.gates().items() if g.locked and g.default)
    deprecated = next(
        n for n, g in upstream.gates().items() if g.stage == "DEPRECATED" and not g.locked
    )
    problems = gate_problems({"NoSuchGate": True, "AlsoNot": False, locked: False})
    assert problems == [
        "unrecognized feature gate: NoSuchGate",
        "unrecognized feature gate: AlsoNot",
        f"cannot set feature gate {locked} to false, feature is locked to true",
    ]
    assert gate_set_warnings({deprecated: True}) == [
        f"Setting deprecated feature gate {deprecated}=true. It will be removed in a future release."
    ]
    with pytest.raises(UsageError) as err:
        build_server([f"--feature-gates=NoSuchGate=true,{locked}=false"])
    text = "\n".join(err.value.problems)
    assert "unrecognized feature gate: NoSuchGate" in text
    assert f"cannot set feature gate {locked} to false, feature is locked to true" in text


def test_all_alpha_and_all_beta_set_every_unset_gate_of_their_stage() -> None:
    gates = upstream.gates()
    alpha = [n for n, g in gates.items() if g.stage == "ALPHA" and n not in ("AllAlpha",)]
    beta = [n for n, g in gates.items() if g.stage == "BETA" and g.default and n != "AllBeta"]
    fg = FeatureGate({"AllAlpha": True, alpha[0]: False, "AllBeta": False})
    assert fg.value(alpha[0]) is False
    assert all(fg.value(n) for n in alpha[1:])
    assert not any(fg.value(n) for n in beta)


def test_gates_outside_node_code_are_accepted_and_inert() -> None:
    inert = [
        n
        for n, g in upstream.gates().items()
        if not g.node_reads and _settable(n) and n not in ("AllAlpha", "AllBeta")
    ]
    assert len(inert) > 50
    flipped = {n: not upstream.gates()[n].default for n in inert}
    s, warnings, _ = build_server(
        ["--feature-gates=" + ",".join(f"{n}={str(v).lower()}" for n, v in flipped.items())]
    )
    assert s is not None
    # no warning names them beyond upstream's own GA/deprecated notices
    own = [w for w in warnings if w.startswith("feature gate ")]
    assert own == []
    # and no code of this kubelet reads them
    assert not set(inert) & {f.value for f in Feature}


def test_gates_are_read_only_through_the_registry() -> None:
    for f in Feature:
        assert f.value in upstream.gates(), f
    offenders = []
    for path in (ROOT / "kubelet").rglob("*.py"):
        text = path.read_text()
        if re.search(r"\.enabled\(\s*[\"']", text) or re.search(r"feature_gates\.get\(", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_refused_gate_exits_1_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # No gate is refused today; the rule is proven on a row flipped here.
    entries = dict(account.entries())
    e = entries[("gate", "MemoryQoS")]
    entries[("gate", "MemoryQoS")] = account.Entry(e.kind, e.name, "refused", "unsafe here", 0)
    monkeypatch.setattr(account, "entries", lambda: entries)
    with pytest.raises(UsageError) as err:
        build_server(["--feature-gates=MemoryQoS=true"])
    assert "feature gate MemoryQoS=true is refused: unsafe here" in err.value.problems


def test_the_command_exits_1_on_an_unknown_gate() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "kubelet", "--feature-gates=Nope=true,Neither=false"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert "unrecognized feature gate: Nope" in p.stderr
    assert "unrecognized feature gate: Neither" in p.stderr
