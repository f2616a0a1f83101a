"""Stand-ins for `sudo`, `systemctl` and `systemd-run`, for the node e2e suite
on a machine whose PID 1 is not systemd.

The suite launches the kubelet with `systemd-run --unit=kubelet-<ts>.service`
when that command is on PATH, and its serial specs stop, kill and restart the
kubelet with `sudo systemctl ...` (after rewriting its config file). Here a
UnitManager, running inside the harness, supervises those units: the commands
on the harness's own PATH (bin/ of the run directory, never the system's) are
thin clients that talk to it over a unix socket named by $KPY_SYSTEMD_SOCKET.

Only what the suite uses is implemented; anything else exits 1 and names the
command, so a spec that needs more fails visibly instead of passing on a no-op.

    python -m benches.node_e2e.systemd systemctl|systemd-run|sudo ARGS...
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SOCKET_ENV = "KPY_SYSTEMD_SOCKET"
# What `systemd-run --version` answers: >= 240 makes the suite append to the
# kubelet's log on restarts (StandardError=append:).
VERSION = "systemd 252 (kubelet-py node-e2e stand-in)"
# The environment a unit's process gets: as systemd gives its services, the
# caller's environment is not passed on.
UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 90.0  # systemd's default TimeoutStopSec


def unescape_exec_arg(arg: str) -> str:
    """One command argument as systemd hands it to exec: `%%` becomes `%` and
    `$$` becomes `$` (the suite doubles both before calling systemd-run). Other
    specifiers and variable references are refused: the stand-in does not
    expand them, and passing them through would run a different command."""
    out: list[str] = []
    i = 0
    while i < len(arg):
        ch = arg[i]
        nxt = arg[i + 1] if i + 1 < len(arg) else ""
        if ch in "%$" and nxt == ch:
            out.append(ch)
            i += 2
            continue
        if ch == "%" or (ch == "$" and (nxt == "{" or nxt.isalpha() or nxt == "_")):
            raise ValueError(f"{ch}{nxt} in {arg!r}: expansion not supported by the stand-in")
        out.append(ch)
        i += 1
    return "".join(out)


@dataclass
class Unit:
    name: str
    argv: list[str]
    log: str = ""
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    # Units the harness itself runs (containerd): start/stop through callbacks.
    on_start: Callable[[], int] | None = None
    on_stop: Callable[[], None] | None = None
    external_pid: int = 0
    failed: bool = False
    starts: int = 0

    def pid(self) -> int:
        if self.on_start is not None:
            return self.external_pid
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        return 0

    def running(self) -> bool:
        return self.pid() > 0

    def sub_state(self) -> tuple[str, str]:
        if self.running():
            return "active", "running"
        if self.failed:
            return "failed", "failed"
        if self.proc is not None and self.proc.returncode not in (None, 0):
            return "failed", "failed"
        return "active" if self.starts else "inactive", "exited" if self.starts else "dead"


class UnitManager:
    """The supervisor of the run's units; serves the stand-in commands."""

    def __init__(self, directory: Path, env: dict[str, str] | None = None) -> None:
        self.dir = directory
        # The environment of the units' processes (plus PATH): what systemd
        # would give a service on this node, e.g. where the system bus is.
        self.env = dict(env or {})
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.dir / "systemd.sock")
        self.units: dict[str, Unit] = {}
        self.lock = threading.Lock()
        self.journal = open(self.dir / "systemctl.log", "a", buffering=1)
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # ----------------------------------------------------------------- server
    def start(self) -> UnitManager:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        manager = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request = json.loads(self.rfile.readline())
                code, out = manager.dispatch(request["cmd"], request["args"], request)
                self.wfile.write(json.dumps({"code": code, "out": out}).encode() + b"\n")

        self._server = socketserver.ThreadingUnixStreamServer(self.socket, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        """Stops every unit this manager started (not the harness's own)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self.lock:
            for unit in self.units.values():
                if unit.on_start is None:
                    self._stop(unit)
        self.journal.close()

    def add_external(
        self, name: str, pid: int, start: Callable[[], int], stop: Callable[[], None]
    ) -> None:
        """A unit the harness runs itself (containerd): systemctl start/stop and
        GetUnitByPID reach it through these callbacks."""
        with self.lock:
            self.units[name] = Unit(
                name, [], on_start=start, on_stop=stop, external_pid=pid, starts=1
            )

    def unit_by_pid(self, pid: int) -> str:
        with self.lock:
            for unit in self.units.values():
                if unit.pid() == pid:
                    return unit.name
        return ""

    def dispatch(self, cmd: str, args: list[str], request: dict[str, object]) -> tuple[int, str]:
        self.journal.write(f"{time.strftime('%H:%M:%S')} {cmd} {' '.join(args)}\n")
        try:
            if cmd == "systemd-run":
                return self._systemd_run(args, request)
            if cmd == "systemctl":
                return self._systemctl(args)
        except (OSError, ValueError) as err:
            return 1, f"{cmd}: {err}\n"
        return 1, f"{cmd}: not a command of the stand-in\n"

    # ------------------------------------------------------------ systemd-run
    def _systemd_run(self, args: list[str], request: dict[str, object]) -> tuple[int, str]:
        name, log, i = "", "", 0
        while i < len(args) and args[i].startswith("-"):
            arg = args[i]
            value = ""
            if arg in ("-p", "--property", "--slice", "--unit", "-u") and i + 1 < len(args):
                value = args[i + 1]
                i += 2
            else:
                arg, _, value = arg.partition("=")
                i += 1
            if arg in ("--unit", "-u"):
                name = value if "." in value else value + ".service"
            elif arg in ("-p", "--property"):
                key, _, prop = value.partition("=")
                if key in ("StandardError", "StandardOutput"):
                    log = prop.split(":", 1)[1] if ":" in prop else ""
                elif key != "Delegate":
                    return 1, f"systemd-run: property {key} not supported by the stand-in\n"
            elif arg not in ("--slice", "--remain-after-exit", "-r", "--no-block"):
                return 1, f"systemd-run: option {arg} not supported by the stand-in\n"
        argv = [unescape_exec_arg(a) for a in args[i:]]
        if not argv:
            return 1, "systemd-run: no command given\n"
        name = name or f"run-{int(time.time() * 1000)}.service"
        cwd = str(request.get("cwd") or "/")
        with self.lock:
            old = self.units.get(name)
            if old is not None and old.running():
                return 1, f"Failed to start transient service unit: Unit {name} already exists.\n"
            unit = Unit(name, argv, log=log, cwd=cwd, env={**self.env, "PATH": UNIT_PATH})
            self.units[name] = unit
            self._start(unit)
        return 0, f"Running as unit: {name}\n"

    def _start(self, unit: Unit) -> None:
        unit.failed = False
        unit.starts += 1
        if unit.on_start is not None:
            unit.external_pid = unit.on_start()
            return
        out = open(unit.log or os.devnull, "ab")
        try:
            unit.proc = subprocess.Popen(
                unit.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=unit.cwd,
                env=unit.env,
                start_new_session=True,  # its own group: `kill` reaches all of it
            )
        finally:
            out.close()

    def _signal(self, unit: Unit, sig: int) -> None:
        if unit.proc is not None and unit.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(unit.proc.pid, sig)

    def _stop(self, unit: Unit) -> None:
        if unit.on_stop is not None:
            if unit.external_pid:
                unit.on_stop()
                unit.external_pid = 0
            return
        if unit.proc is None or unit.proc.poll() is not None:
            return
        self._signal(unit, signal.SIGTERM)
        try:
            unit.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._signal(unit, signal.SIGKILL)
            unit.proc.wait()
        # The rest of the group (children the main process left behind).
        self._signal(unit, signal.SIGKILL)

    # -------------------------------------------------------------- systemctl
    def _systemctl(self, args: list[str]) -> tuple[int, str]:
        opts = [a for a in args if a.startswith("-")]
        words = [a for a in args if not a.startswith("-")]
        if not words:
            return 1, "systemctl: no verb given\n"
        verb, names = words[0], words[1:]
        if verb == "list-units":
            return self._list_units(names, opts)
        if verb == "daemon-reload":
            return 0, ""
        with self.lock:
            units = []
            for n in names:
                unit = self.units.get(n) or self.units.get(n + ".service")
                if unit is None:
                    return (3 if verb == "is-active" else 5), f"Unit {n} not loaded.\n"
                units.append(unit)
            return self._unit_verb(verb, units, opts)

    def _unit_verb(self, verb: str, units: list[Unit], opts: list[str]) -> tuple[int, str]:
        out = []
        for unit in units:
            if verb == "kill":
                sig = signal.SIGTERM
                for o in opts:
                    if o.startswith(("--signal=", "-s")):
                        sig = signal.Signals["SIG" + o.split("=")[-1].removeprefix("SIG")]
                if unit.on_start is not None:
                    return 1, "systemctl kill: not supported for the harness's own units\n"
                self._signal(unit, sig)
            elif verb == "stop":
                self._stop(unit)
            elif verb == "start":
                if not unit.running():
                    self._start(unit)
            elif verb == "restart":
                self._stop(unit)
                self._start(unit)
            elif verb == "reset-failed":
                unit.failed = False
            elif verb == "is-active":
                active, sub = unit.sub_state()
                out.append(active if sub != "dead" else "inactive")
                if not unit.running():
                    return 3, "\n".join(out) + "\n"
            elif verb == "status":
                active, sub = unit.sub_state()
                out.append(f"* {unit.name}\n   Active: {active} ({sub})\n Main PID: {unit.pid()}")
            else:
                return 1, f"systemctl {verb}: not supported by the stand-in\n"
        return 0, "".join(line + "\n" for line in out)

    def _list_units(self, patterns: list[str], opts: list[str]) -> tuple[int, str]:
        states = {s for o in opts if o.startswith("--state=") for s in o[8:].split(",")}
        rows = []
        with self.lock:
            for unit in self.units.values():
                if patterns and not any(fnmatch.fnmatch(unit.name, p) for p in patterns):
                    continue
                active, sub = unit.sub_state()
                if sub == "dead" or (states and not states & {active, sub}):
                    continue
                rows.append(f"  {unit.name} loaded {active} {sub} {unit.name}")
        lines = [
            "  UNIT LOAD ACTIVE SUB DESCRIPTION",
            *rows,
            "",
            f"{len(rows)} loaded units listed.",
        ]
        return 0, "\n".join(lines) + "\n"


# ------------------------------------------------------------------ clients
def _call(cmd: str, args: list[str]) -> int:
    path = os.environ.get(SOCKET_ENV, "")
    if not path:
        print(
            f"{cmd}: ${SOCKET_ENV} is not set (run through the node e2e harness)", file=sys.stderr
        )
        return 1
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(json.dumps({"cmd": cmd, "args": args, "cwd": os.getcwd()}).encode() + b"\n")
        reply = json.loads(s.makefile().readline())
    sys.stdout.write(reply["out"])
    return int(reply["code"])


def _sudo(args: list[str]) -> int:
    """The harness runs as root: run the command as it is."""
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-u", "-g") and args:
            who = args.pop(0)
            if who not in ("root", "0", "#0"):
                print(f"sudo: -u {who}: only root is supported by the stand-in", file=sys.stderr)
                return 1
        elif opt not in ("-E", "-n", "-H", "--preserve-env", "--non-interactive"):
            print(f"sudo: option {opt} not supported by the stand-in", file=sys.stderr)
            return 1
    if not args:
        return 1
    os.execvp(args[0], args)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "sudo":
        return _sudo(args)
    if cmd == "systemd-run" and "--version" in args:
        print(VERSION)
        return 0
    if cmd == "systemctl" and "--version" in args:
        print(VERSION)
        return 0
    if cmd in ("systemctl", "systemd-run"):
        return _call(cmd, args)
    print(f"{cmd}: not a stand-in command", file=sys.stderr)
    return 1


def install(bindir: Path, python: str, repo: Path) -> None:
    """The stand-in commands as small scripts in bindir (put first on the
    suite's PATH)."""
    bindir.mkdir(parents=True, exist_ok=True)
    for cmd in ("sudo", "systemctl", "systemd-run"):
        script = bindir / cmd
        script.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{repo}${{PYTHONPATH:+:$PYTHONPATH}}" '
            f'exec "{python}" -m benches.node_e2e.systemd {cmd} "$@"\n'
        )
        script.chmod(0o755)


if __name__ == "__main__":
    sys.exit(main())
