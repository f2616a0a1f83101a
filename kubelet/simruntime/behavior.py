"""What a simulated container "does", read from its command line or an annotation.

The simulated runtime runs no processes. It reads the container's command and
args the way a shell would read a simple script, so the same manifests run on
busybox under containerd and here:

    sh -c "echo starting; sleep 2; exit 3"   prints, waits 2s, exits 3
    sh -c "trap '' TERM; sleep 3600"         ignores SIGTERM until the stop timeout
    sleep 5 / true / false                   as the coreutils do
    sleep infinity, or no command at all     runs until stopped
    sh -c "while true; do echo tick; sleep 1; done"   prints "tick" every second

The annotation sim.kubelet.io/behavior, when present, is read first with the
same syntax (for example "echo hi; sleep 1; exit 2").
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from kubelet.cri.api import api_pb2 as pb

ANNOTATION = "sim.kubelet.io/behavior"

FOREVER = float("inf")


@dataclass
class Step:
    at: float  # seconds after start
    line: str  # a line for stdout


@dataclass
class Behavior:
    output: list[Step] = field(default_factory=list)
    exit_after: float = FOREVER  # seconds after start; inf: runs until stopped
    exit_code: int = 0
    ignore_sigterm: bool = False
    # A loop that prints `repeat_line` every `repeat_every` seconds.
    repeat_line: str = ""
    repeat_every: float = 0.0


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def _seconds(text: str) -> float:
    if text == "infinity":
        return FOREVER
    m = _DURATION.match(text)
    if not m:
        raise ValueError(text)
    mult = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return float(m.group(1)) * mult


def parse(command: list[str], args: list[str], annotation: str | None = None) -> Behavior:
    if annotation:
        return _script(annotation)
    argv = [*command, *args]
    if not argv:
        return Behavior()  # the image's entrypoint: assume a server that runs forever
    prog = argv[0].rsplit("/", 1)[-1]
    if prog in ("sh", "bash", "ash") and len(argv) >= 3 and argv[1] == "-c":
        return _script(argv[2])
    return _script(shlex.join(argv))


def _script(script: str) -> Behavior:
    b = Behavior()
    t = 0.0
    loop = re.match(r"^\s*while\s+(true|:)\s*;\s*do\s+(.*?);?\s*done\s*$", script, re.S)
    if loop:
        body = _script(loop.group(2))
        if body.output:
            b.repeat_line = body.output[0].line
            b.repeat_every = max(0.05, body.exit_after if body.exit_after != FOREVER else 1.0)
        b.exit_after = FOREVER
        return b
    for raw in re.split(r";|&&|\n", script):
        words = _words(raw)
        if not words:
            continue
        cmd = words[0].rsplit("/", 1)[-1]
        if cmd == "echo":
            b.output.append(Step(t, " ".join(words[1:])))
        elif cmd == "sleep":
            try:
                t += sum(_seconds(w) for w in words[1:]) if len(words) > 1 else 0
            except ValueError:
                b.exit_after, b.exit_code = t, 1  # sleep: invalid time interval
                return b
            if t == FOREVER:
                b.exit_after = FOREVER
                return b
        elif cmd == "exit":
            b.exit_after = t
            b.exit_code = int(words[1]) % 256 if len(words) > 1 and words[1].isdigit() else 0
            return b
        elif cmd == "false":
            b.exit_after, b.exit_code = t, 1
            return b
        elif cmd == "trap" and "TERM" in words:
            b.ignore_sigterm = True
        elif cmd in ("true", ":", "trap"):
            pass
        else:
            # Anything else: a long-running program (a server, `tail -f`, ...).
            b.exit_after = FOREVER
            return b
    b.exit_after = t
    b.exit_code = 0
    return b


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def exec_sync(cmd: list[str], hostname: str) -> pb.ExecSyncResponse:
    """A few commands probes and tests exec, answered as busybox would."""
    if not cmd:
        return pb.ExecSyncResponse(stderr=b"no command", exit_code=126)
    prog = cmd[0].rsplit("/", 1)[-1]
    if prog == "echo":
        return pb.ExecSyncResponse(stdout=(" ".join(cmd[1:]) + "\n").encode())
    if prog == "true":
        return pb.ExecSyncResponse()
    if prog == "false":
        return pb.ExecSyncResponse(exit_code=1)
    if prog == "hostname" or cmd[:2] == ["cat", "/etc/hostname"]:
        return pb.ExecSyncResponse(stdout=(hostname + "\n").encode())
    if prog in ("sh", "bash") and len(cmd) >= 3 and cmd[1] == "-c":
        script = cmd[2].strip()
        if script.startswith("exit"):
            parts = script.split()
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            return pb.ExecSyncResponse(exit_code=code)
        return exec_sync(script.split(), hostname)
    return pb.ExecSyncResponse(
        stderr=f'exec: "{cmd[0]}": executable file not found in $PATH'.encode(), exit_code=127
    )
