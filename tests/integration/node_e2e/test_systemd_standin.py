"""The systemd stand-ins of the node e2e harness, driven through their
commands as the suite drives them (sudo systemctl ..., systemd-run ...)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benches.node_e2e.systemd import SOCKET_ENV, UnitManager, install
from kubelet.testing.wait import wait_for

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[tuple[UnitManager, dict[str, str]]]:
    manager = UnitManager(tmp_path / "systemd").start()
    install(tmp_path / "sbin", sys.executable, REPO)
    env = dict(os.environ, PATH=f"{tmp_path / 'sbin'}:{os.environ['PATH']}")
    env[SOCKET_ENV] = manager.socket
    try:
        yield manager, env
    finally:
        manager.close()


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_kubelet_unit_lifecycle_as_the_suite_drives_it(
    standin: tuple[UnitManager, dict[str, str]], tmp_path: Path
) -> None:
    _, env = standin
    log = tmp_path / "kubelet.log"
    # What services/kubelet.go runs when systemd-run is on PATH.
    assert "systemd 252" in run(env, "systemd-run", "--version").stdout
    r = run(
        env, "systemd-run", "-p", "Delegate=true", "-p", f"StandardError=append:{log}",
        "--unit=kubelet-20261125T183000.service", "--slice=runtime.slice", "--remain-after-exit",
        # Escaped as adjustArgsForSystemd escapes: the shell sees `$$`.
        "/bin/sh", "-c", "echo started $$$$; exec sleep 600",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout
    wait_for(
        "the unit's first start in its log",
        lambda: log.read_text().count("started") == 1,
        20.0,
        0.05,
        retry_on=(),
    )
    first = int(log.read_text().split()[1])

    # findKubeletServiceName: the regex (kubelet-\w+) over sudo systemctl list-units.
    r = run(env, "sudo", "systemctl", "list-units", "*kubelet*", "--state=running")
    assert "kubelet-20261125T183000.service loaded active running" in r.stdout
    assert run(env, "sudo", "systemctl", "reset-failed", "kubelet-20261125T183000").returncode == 0

    # mustStopKubelet: kill, then the unit is no longer running.
    assert run(env, "sudo", "systemctl", "kill", "kubelet-20261125T183000").returncode == 0
    wait_for(
        "the first process gone",
        lambda: not os.path.exists(f"/proc/{first}") or _zombie(first),
        20.0,
        0.05,
        retry_on=(),
    )
    r = run(env, "sudo", "systemctl", "list-units", "*kubelet*", "--state=running")
    assert "kubelet-" not in r.stdout.replace("*kubelet*", "")

    # ... and restart runs the same command again, appending to the same log.
    assert run(env, "sudo", "systemctl", "restart", "kubelet-20261125T183000").returncode == 0
    wait_for(
        "the unit's second start in its log",
        lambda: log.read_text().count("started") == 2,
        20.0,
        0.05,
        retry_on=(),
    )
    second = int(log.read_text().split()[3])
    assert second != first
    assert run(env, "systemctl", "is-active", "kubelet-20261125T183000.service").returncode == 0

    assert run(env, "sudo", "systemctl", "stop", "kubelet-20261125T183000").returncode == 0
    assert not os.path.exists(f"/proc/{second}") or _zombie(second)
    assert run(env, "systemctl", "is-active", "kubelet-20261125T183000").returncode == 3


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_unknown_units_verbs_and_options_fail_loudly(
    standin: tuple[UnitManager, dict[str, str]],
) -> None:
    _, env = standin
    assert run(env, "systemctl", "restart", "nosuch.service").returncode != 0
    r = run(env, "systemctl", "enable", "x.service")
    assert r.returncode != 0
    r = run(env, "systemd-run", "-p", "MemoryMax=1G", "--unit=a", "true")
    assert r.returncode == 1 and "MemoryMax" in r.stdout
    r = run(env, "sudo", "-u", "nobody", "true")
    assert r.returncode == 1


def test_external_unit_start_stop_and_lookup_by_pid(
    standin: tuple[UnitManager, dict[str, str]],
) -> None:
    manager, env = standin
    calls: list[str] = []
    manager.add_external(
        "containerd.service",
        4242,
        lambda: _record(calls, "start", 4343),
        lambda: calls.append("stop"),
    )
    assert manager.unit_by_pid(4242) == "containerd.service"
    assert run(env, "systemctl", "stop", "containerd").returncode == 0
    assert manager.unit_by_pid(4242) == ""
    assert run(env, "systemctl", "start", "containerd").returncode == 0
    assert calls == ["stop", "start"]
    assert manager.unit_by_pid(4343) == "containerd.service"
    # The harness's own units are not killed by signal through the stand-in.
    assert run(env, "systemctl", "kill", "containerd").returncode == 1


def _record(calls: list[str], what: str, pid: int) -> int:
    calls.append(what)
    return pid


def test_exec_arguments_are_unescaped_as_systemd_does(
    standin: tuple[UnitManager, dict[str, str]], tmp_path: Path
) -> None:
    _, env = standin
    log = tmp_path / "args.log"
    # The suite doubles % and $ in every kubelet flag; the process must get them single.
    r = run(
        env, "systemd-run", f"-p=StandardError=append:{log}", "--unit=args",
        "/bin/sh", "-c", 'echo "$0" >&2', "--eviction-hard=nodefs.available<1%%,x=$$HOME",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout
    wait_for(
        "the unit's log written",
        lambda: log.exists() and log.read_text().strip() != "",
        20.0,
        0.05,
        retry_on=(),
    )
    assert log.read_text().strip() == "--eviction-hard=nodefs.available<1%,x=$HOME"
    # A specifier or a variable the stand-in would not expand is refused, not passed on.
    for arg in ("--root-dir=%h/kubelet", "--x=${HOME}", "--y=$HOME", "50%"):
        r = run(env, "systemd-run", "--unit=bad", "/bin/true", arg)
        assert r.returncode == 1 and "not supported" in r.stdout, (arg, r.stdout)
