"""A small systemd-logind stand-in for tests, on a private system bus
(kubelet/testing/dbus.py): this machine runs no logind.

It owns org.freedesktop.login1 and org.freedesktop.systemd1 and serves what a
kubelet uses, as logind does:
- Manager.Inhibit(what, who, why, mode) -> a pipe's write end; the inhibitor
  lives until every copy of it is closed;
- Manager.ListInhibitors() -> a(ssssuu);
- the InhibitDelayMaxUSec property (Properties.Get / GetAll), read from
  logind.conf and the *.conf drop-ins of <conf-dir>/logind.conf.d (later
  files win), 5 s when unset;
- systemd1's Manager.KillUnit("systemd-logind.service", _, SIGHUP): read the
  configuration again;
- Manager.PowerOff(interactive): PrepareForShutdown(true), then wait until no
  "delay" inhibitor for shutdown is left or InhibitDelayMaxUSec has passed.
Test control (interface io.kubeletpy.Login1Test): EmitPrepareForShutdown(b)
sends the signal as logind; LastShutdown() -> (signal time, time the delay
ended, whether it ran out) as seconds since the epoch.

Run as `python -m kubelet.testing.login1 --conf-dir DIR` with
DBUS_SYSTEM_BUS_ADDRESS set; it prints "ready" once it owns its names.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from kubelet.testing.helpers import stop_process

LOGIN1 = "org.freedesktop.login1"
LOGIN1_PATH = "/org/freedesktop/login1"
MANAGER = "org.freedesktop.login1.Manager"
SYSTEMD1 = "org.freedesktop.systemd1"
SYSTEMD1_PATH = "/org/freedesktop/systemd1"
SYSTEMD_MANAGER = "org.freedesktop.systemd1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
TEST = "io.kubeletpy.Login1Test"
DEFAULT_DELAY_USEC = 5_000_000
_WHATS = {"shutdown", "sleep", "idle", "handle-power-key", "handle-suspend-key",
          "handle-hibernate-key", "handle-lid-switch", "handle-reboot-key"}  # fmt: skip
_UNITS = {"us": 1, "usec": 1, "ms": 1000, "msec": 1000, "s": 10**6, "sec": 10**6,
          "second": 10**6, "seconds": 10**6, "m": 60 * 10**6, "min": 60 * 10**6,
          "minute": 60 * 10**6, "minutes": 60 * 10**6, "h": 3600 * 10**6, "hr": 3600 * 10**6,
          "hour": 3600 * 10**6, "hours": 3600 * 10**6, "": 10**6}  # fmt: skip


def parse_timespan(text: str) -> int:
    """A systemd time span ("30", "5s", "1min 30s") in microseconds."""
    total = 0
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip().lower())
    if not parts:
        raise ValueError(f"invalid time span {text!r}")
    for number, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"invalid time unit {unit!r} in {text!r}")
        total += int(float(number) * _UNITS[unit])
    return total


def read_inhibit_delay(conf_dir: str) -> int:
    """InhibitDelayMaxSec from logind.conf, then logind.conf.d/*.conf in order."""
    files = [os.path.join(conf_dir, "logind.conf")]
    drop_ins = os.path.join(conf_dir, "logind.conf.d")
    with contextlib.suppress(FileNotFoundError):
        files += sorted(
            os.path.join(drop_ins, n) for n in os.listdir(drop_ins) if n.endswith(".conf")
        )
    value = DEFAULT_DELAY_USEC
    for path in files:
        with contextlib.suppress(FileNotFoundError):
            section = ""
            for line in open(path).read().splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1]
                elif section == "Login" and line.startswith("InhibitDelayMaxSec="):
                    value = parse_timespan(line.split("=", 1)[1])
    return value


@dataclass
class Inhibitor:
    what: str
    who: str
    why: str
    mode: str
    uid: int
    pid: int
    read_fd: int


class Login1:
    def __init__(self, bus: MessageBus, conf_dir: str) -> None:
        self.bus = bus
        self.conf_dir = conf_dir
        self.delay_usec = read_inhibit_delay(conf_dir)
        self.inhibitors: dict[int, Inhibitor] = {}
        self.released = asyncio.Event()
        self.last_shutdown: tuple[float, float, bool] = (0.0, 0.0, False)
        self.reloads = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------ dispatch
    def handle(self, msg: Message) -> Message | bool | None:
        if msg.message_type is not MessageType.METHOD_CALL:
            return None
        key = (msg.path, msg.interface, msg.member)
        if key == (LOGIN1_PATH, MANAGER, "Inhibit"):
            self._spawn(self._inhibit(msg))
            return True
        if key == (LOGIN1_PATH, MANAGER, "PowerOff"):
            self._spawn(self._power_off())
            return Message.new_method_return(msg)
        if key == (LOGIN1_PATH, MANAGER, "ListInhibitors"):
            rows = [[i.what, i.who, i.why, i.mode, i.uid, i.pid] for i in self.inhibitors.values()]
            return Message.new_method_return(msg, "a(ssssuu)", [rows])
        if key == (LOGIN1_PATH, PROPERTIES, "Get"):
            return self._get(msg)
        if key == (LOGIN1_PATH, PROPERTIES, "GetAll"):
            props = {"InhibitDelayMaxUSec": Variant("t", self.delay_usec)}
            return Message.new_method_return(
                msg, "a{sv}", [props if msg.body[0] == MANAGER else {}]
            )
        if key == (SYSTEMD1_PATH, SYSTEMD_MANAGER, "KillUnit"):
            return self._kill_unit(msg)
        if key == (LOGIN1_PATH, TEST, "EmitPrepareForShutdown"):
            self.emit(bool(msg.body[0]))
            return Message.new_method_return(msg)
        if key == (LOGIN1_PATH, TEST, "LastShutdown"):
            return Message.new_method_return(msg, "ddb", list(self.last_shutdown))
        if (
            msg.path in (LOGIN1_PATH, SYSTEMD1_PATH)
            and msg.interface != "org.freedesktop.DBus.Introspectable"
        ):
            return Message.new_error(
                msg, "org.freedesktop.DBus.Error.UnknownMethod", f"Unknown method {msg.member}"
            )
        return None

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _get(self, msg: Message) -> Message:
        iface, prop = msg.body
        if iface == MANAGER and prop == "InhibitDelayMaxUSec":
            return Message.new_method_return(msg, "v", [Variant("t", self.delay_usec)])
        return Message.new_error(
            msg, "org.freedesktop.DBus.Error.UnknownProperty", f"Unknown property {prop}"
        )

    def _kill_unit(self, msg: Message) -> Message:
        unit, _who, signo = msg.body
        if unit != "systemd-logind.service":
            return Message.new_error(
                msg, "org.freedesktop.systemd1.NoSuchUnit", f"Unit {unit} not loaded."
            )
        if signo == signal.SIGHUP:
            self.delay_usec = read_inhibit_delay(self.conf_dir)
            self.reloads += 1
        return Message.new_method_return(msg)

    # ----------------------------------------------------------- inhibitors
    async def _inhibit(self, msg: Message) -> None:
        what, who, why, mode = msg.body
        if mode not in ("block", "delay") or not set(what.split(":")) <= _WHATS:
            await self.bus.send(
                Message.new_error(
                    msg, "org.freedesktop.DBus.Error.InvalidArgs", "Invalid what or mode"
                )
            )
            return
        uid = await self._sender_info("GetConnectionUnixUser", msg.sender)
        pid = await self._sender_info("GetConnectionUnixProcessID", msg.sender)
        r, w = os.pipe()
        try:
            await self.bus.send(Message.new_method_return(msg, "h", [0], [w]))
        finally:
            os.close(w)  # the caller holds the only write end now
        self.inhibitors[r] = Inhibitor(what, who, why, mode, uid, pid, r)
        asyncio.get_running_loop().add_reader(r, self._maybe_released, r)

    async def _sender_info(self, member: str, sender: str | None) -> int:
        reply = await self.bus.call(
            Message(
                destination="org.freedesktop.DBus",
                path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus",
                member=member,
                signature="s",
                body=[sender],
            )
        )
        return int(reply.body[0]) if reply.message_type is MessageType.METHOD_RETURN else 0

    def _maybe_released(self, r: int) -> None:
        with contextlib.suppress(BlockingIOError):
            if os.read(r, 4096):
                return  # somebody wrote to it: still held
        asyncio.get_running_loop().remove_reader(r)
        os.close(r)
        self.inhibitors.pop(r, None)
        if not self._delay_locks():
            self.released.set()

    def _delay_locks(self) -> list[Inhibitor]:
        return [
            i for i in self.inhibitors.values()
            if i.mode == "delay" and "shutdown" in i.what.split(":")
        ]  # fmt: skip

    # ------------------------------------------------------------- shutdown
    def emit(self, active: bool) -> None:
        self.bus.send(Message.new_signal(LOGIN1_PATH, MANAGER, "PrepareForShutdown", "b", [active]))

    async def _power_off(self) -> None:
        start = time.time()
        self.released.clear()
        if not self._delay_locks():
            self.released.set()
        self.emit(True)
        timed_out = False
        try:
            await asyncio.wait_for(self.released.wait(), self.delay_usec / 1e6)
        except TimeoutError:
            timed_out = True
        self.last_shutdown = (start, time.time(), timed_out)


async def serve(conf_dir: str) -> None:
    bus = await MessageBus(bus_type=BusType.SYSTEM, negotiate_unix_fd=True).connect()
    login1 = Login1(bus, conf_dir)
    bus.add_message_handler(login1.handle)
    for name in (LOGIN1, SYSTEMD1):
        await bus.request_name(name)
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    done = asyncio.ensure_future(bus.wait_for_disconnect())
    await asyncio.wait(
        {done, asyncio.ensure_future(stop.wait())}, return_when=asyncio.FIRST_COMPLETED
    )
    bus.disconnect()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="login1-standin", description=__doc__.split("\n")[0])
    ap.add_argument("--conf-dir", required=True, help="where logind.conf(.d) would live")
    args = ap.parse_args(argv)
    asyncio.run(serve(args.conf_dir))


class Login1Process:
    """The stand-in as a child process on a bus (test side)."""

    def __init__(self, bus_env: dict[str, str], conf_dir: str, log_path: str) -> None:
        self.conf_dir = conf_dir
        os.makedirs(conf_dir, exist_ok=True)
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet.testing.login1", "--conf-dir", conf_dir],
            stdout=subprocess.PIPE, stderr=self.log, env=bus_env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"login1 stand-in did not start (exit {self.proc.poll()})")

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def in_private_etc_systemd(etc_dir: str, argv: list[str]) -> list[str]:
    """argv run in a mount namespace of its own where /etc/systemd is etc_dir,
    so a kubelet writes its logind drop-in (/etc/systemd/logind.conf.d) where
    the stand-in reads it, and not into the host's /etc. Mounts the process
    makes stay in that namespace: only for pods without volumes it mounts."""
    script = 'mount --bind "$0" /etc/systemd && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, etc_dir, *argv]


async def call(address: str, member: str, iface: str = TEST, sig: str = "", body: Any = ()) -> Any:
    """One call to the stand-in from a connection of its own; the reply's body."""
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    try:
        reply = await bus.call(
            Message(
                destination=LOGIN1,
                path=LOGIN1_PATH,
                interface=iface,
                member=member,
                signature=sig,
                body=list(body),
            )
        )
        if reply.message_type is MessageType.ERROR:
            raise RuntimeError(f"{reply.error_name}: {reply.body}")
        return reply.body
    finally:
        bus.disconnect()


async def emit_as_client(address: str, active: bool) -> None:
    """PrepareForShutdown sent from a plain client, as upstream's node e2e tests do."""
    bus = await MessageBus(bus_address=address).connect()
    try:
        await bus.send(
            Message.new_signal(LOGIN1_PATH, MANAGER, "PrepareForShutdown", "b", [active])
        )
    finally:
        bus.disconnect()


if __name__ == "__main__":
    main()
