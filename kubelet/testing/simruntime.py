"""The simulated CRI runtime as a real process on a unix socket, for tests and
benchmarks (the simulated runtime is a part like containerd: always a process,
never an in-process fake, where a test means the runtime)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubelet.testing.process import short_dir, stop_process
from kubelet.testing.wait import wait_for


@dataclass
class SimRuntimeProc:
    endpoint: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        stop_process(self.proc)


def start_simruntime(
    directory: Path | None = None,
    *extra: str,
    log: Path | None = None,
    timeout: float = 10,
    command: Sequence[str] = (sys.executable, "-m", "kubelet.simruntime"),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> SimRuntimeProc:
    """The simulated runtime listening on `directory`/sim.sock (a new short
    directory when none is given), its output in `log` (`directory`/
    simruntime.log); RuntimeError if it exits or its socket does not appear
    within `timeout` s."""
    directory = directory or short_dir("sim")
    sock = directory / "sim.sock"
    log = log or directory / "simruntime.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--listen", f"unix://{sock}", *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
        )

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"simruntime exited: {log.read_text()}")
        return sock.exists()

    try:
        wait_for("the simulated runtime's socket", listening, timeout, every=0.05, retry_on=())
    except AssertionError:
        proc.kill()
        proc.wait()
        raise RuntimeError("simruntime socket did not appear") from None
    return SimRuntimeProc(f"unix://{sock}", proc, log)
