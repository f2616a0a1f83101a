"""packaging/systemd: the unit's ExecStart, run as systemd would run it, with a
NOTIFY_SOCKET this test listens on: READY=1 once the kubelet serves, then
WATCHDOG=1 every WATCHDOG_USEC/2; a watchdog timeout of 1 s or less is refused."""

from __future__ import annotations

import asyncio
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kubelet import watchdog
from kubelet.testing.net import free_port, wait_http

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "packaging" / "systemd" / "kubelet.service"
DROPIN = ROOT / "packaging" / "systemd" / "kubelet.service.d" / "10-kubeadm.conf"


def _service(path: Path) -> list[tuple[str, str]]:
    out, section = [], ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            k, _, v = line.partition("=")
            out.append((k, v))
    return out


def exec_start(env: dict[str, str]) -> list[str]:
    """ExecStart after the drop-in, with $VAR expanded as systemd does for an
    unquoted $VAR: split on whitespace, an empty one gives no argument."""
    cmd = ""
    unit_env: dict[str, str] = {}
    for k, v in _service(UNIT) + _service(DROPIN):
        if k == "ExecStart":
            cmd = v  # an empty assignment resets, the next one replaces
        elif k == "Environment":
            name, _, value = shlex.split(v)[0].partition("=")
            unit_env[name] = value
    unit_env.update(env)  # the EnvironmentFile= lines, here given by the test
    argv: list[str] = []
    for word in shlex.split(cmd):
        if word.startswith("$"):
            argv.extend(unit_env.get(word[1:], "").split())
        else:
            argv.append(word)
    return argv


def test_unit_is_notify_with_a_watchdog_and_restarts() -> None:
    svc = dict(_service(UNIT))
    assert svc["Type"] == "notify"
    assert svc["Restart"] == "always"
    assert float(svc["WatchdogSec"].rstrip("s")) > watchdog.MINIMAL_NOTIFY_INTERVAL
    argv = exec_start({})
    assert argv[0] == "/usr/bin/kubelet"
    assert "--config=/var/lib/kubelet/config.yaml" in argv


def _listen() -> tuple[socket.socket, str]:
    name = f"kubelet-test-{os.getpid()}-{time.monotonic_ns()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)  # abstract: NOTIFY_SOCKET=@name
    s.settimeout(0.5)
    return s, "@" + name


def _run(
    tmp: Path, sim_endpoint: str, extra_env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int, Path]:
    cfg = tmp / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": "127.0.0.1",
                "cgroupsPerQOS": False,
                # Standalone: no API server to ask about webhook tokens or access.
                "authentication": {"webhook": {"enabled": False}},
                "authorization": {"mode": "AlwaysAllow"},
                "enforceNodeAllocatable": [],
                "port": free_port(),
                "readOnlyPort": 0,
                "healthzPort": (healthz := free_port()),
                "containerRuntimeEndpoint": sim_endpoint,
                "staticPodPath": str(tmp / "m"),
            }
        )
    )
    (tmp / "m").mkdir(exist_ok=True)
    argv = exec_start(
        {
            "KUBELET_KUBECONFIG_ARGS": "",  # standalone: no API server here
            "KUBELET_CONFIG_ARGS": f"--config={cfg}",
            "KUBELET_EXTRA_ARGS": (
                f"--root-dir={tmp / 'root'} --cert-dir={tmp / 'pki'} "
                f"--pod-logs-dir={tmp / 'logs'} --hostname-override=node-sd"
            ),
        }
    )
    # /usr/bin/kubelet is where the package puts the command; here it is this checkout's.
    argv = [sys.executable, "-m", "kubelet", *argv[1:]]
    log = tmp / f"kubelet-{time.monotonic_ns()}.log"
    env = {**os.environ, **extra_env}
    proc = subprocess.Popen(argv, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    return proc, healthz, log


def test_exec_start_notifies_ready_then_pings_the_watchdog(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sock, addr = _listen()
    proc, healthz, log = _run(
        tmp_path, simruntime.endpoint, {"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "2000000"}
    )
    got: list[tuple[float, str]] = []
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                got.append((time.monotonic(), sock.recv(4096).decode()))
            except TimeoutError:
                continue
            ready = [t for t, m in got if m == "READY=1"]
            if ready and sum(m == "WATCHDOG=1" and t > ready[0] for t, m in got) >= 3:
                break
        states = [m for _, m in got]
        assert "READY=1" in states, (states, log.read_text()[-3000:])
        # READY=1 means serving: the healthz port answers by then.
        assert wait_http(f"http://127.0.0.1:{healthz}/healthz", timeout=2) == b"ok"
        pings = [t for t, m in got if m == "WATCHDOG=1"]
        assert len(pings) >= 3, states
        gaps = [b - a for a, b in itertools.pairwise(pings)]
        # Every WATCHDOG_USEC/2 = 1 s (and never near the 2 s timeout).
        assert all(0.5 < g < 1.8 for g in gaps), gaps
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        sock.close()


def test_a_watchdog_timeout_of_one_second_is_refused(simruntime, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, _, log = _run(
        tmp_path,
        simruntime.endpoint,
        {"NOTIFY_SOCKET": "@nobody-listens", "WATCHDOG_USEC": "1000000"},
    )
    assert proc.wait(60) == 1
    text = log.read_text()
    assert "watchdog timeout too small" in text and "Traceback" not in text


async def test_a_failing_check_skips_the_ping() -> None:
    sent: list[str] = []
    failing: dict[str, str | None] = {"syncloop": None}

    def notify(state: str) -> bool:
        sent.append(state)
        return True

    hc = watchdog.HealthChecker(
        lambda: {"syncloop": lambda: failing["syncloop"]}, timeout=4.0, notify=notify
    )
    assert hc.interval == 2.0
    await hc.ping()
    failing["syncloop"] = "sync loop last ran 301s ago"
    await hc.ping()
    assert sent == ["WATCHDOG=1"]
    failing["syncloop"] = None
    await hc.ping()
    assert sent == ["WATCHDOG=1", "WATCHDOG=1"]


async def test_other_processes_watchdog_is_not_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    hc = watchdog.HealthChecker.from_environment(dict)
    stop = asyncio.Event()
    await asyncio.wait_for(hc.run(stop), 1)  # returns at once: not enabled for us
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog.HealthChecker.from_environment(dict).interval == 15.0
    monkeypatch.setenv("WATCHDOG_USEC", "soon")
    with pytest.raises(watchdog.WatchdogError):
        watchdog.HealthChecker.from_environment(dict)
