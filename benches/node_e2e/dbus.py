"""A private system bus with the two services of systemd the node e2e suite
talks to, for a machine without systemd.

- org.freedesktop.systemd1: the suite stops and starts the container runtime
  through it (GetUnitByPID, then StopUnit/StartUnit and the JobRemoved
  signal, through coreos/go-systemd); the units are the UnitManager's.
- org.freedesktop.login1: the kubelet's graceful node shutdown takes a delay
  inhibitor lock from logind and listens for PrepareForShutdown, which the
  shutdown specs emit on the bus themselves.

The bus is Debian's dbus-daemon with a config of its own (a socket in the run
directory); the suite and the kubelet find it through DBUS_SYSTEM_BUS_ADDRESS,
which the harness sets for them and for nothing else. The wire format is the
D-Bus specification's, written out for the few types these calls use.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.node_e2e.systemd import UnitManager

CALL, RETURN, ERROR, SIGNAL = 1, 2, 3, 4
# Header field codes.
PATH, INTERFACE, MEMBER, ERROR_NAME, REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE, UNIX_FDS = range(
    1, 10
)
FIELD_TYPES = {PATH: "o", INTERFACE: "s", MEMBER: "s", ERROR_NAME: "s", REPLY_SERIAL: "u",
               DESTINATION: "s", SENDER: "s", SIGNATURE: "g", UNIX_FDS: "u"}  # fmt: skip
ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "s": 4, "o": 4,
         "g": 1, "h": 4, "v": 1, "a": 4, "(": 8, "{": 8}  # fmt: skip
FIXED = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q", "d": "d",
         "h": "I"}  # fmt: skip

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="*"/>
  </policy>
</busconfig>
"""


def split_signature(sig: str) -> list[str]:
    """The complete types of a signature, in order."""
    out, i = [], 0
    while i < len(sig):
        j = _type_end(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def _type_end(sig: str, i: int) -> int:
    c = sig[i]
    if c == "a":
        return _type_end(sig, i + 1)
    if c in "({":
        depth, j = 0, i
        while True:
            if sig[j] in "({":
                depth += 1
            elif sig[j] in ")}":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
    return i + 1


class Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def pad(self, n: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % n)

    def write(self, t: str, v: Any) -> None:
        self.pad(ALIGN[t[0]])
        c = t[0]
        if c in FIXED:
            self.buf += struct.pack("<" + FIXED[c], v)
        elif c in "so":
            data = v.encode()
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
        elif c == "g":
            self.buf += bytes([len(v)]) + v.encode() + b"\0"
        elif c == "v":
            sig, value = v
            self.write("g", sig)
            self.write(sig, value)
        elif c == "a":
            elem = t[1:]
            at = len(self.buf)
            self.buf += b"\0\0\0\0"
            self.pad(ALIGN[elem[0]])
            start = len(self.buf)
            items = v.items() if elem[0] == "{" else v
            for item in items:
                self.write(elem, item)
            struct.pack_into("<I", self.buf, at, len(self.buf) - start)
        elif c in "({":
            for sub, item in zip(split_signature(t[1:-1]), v, strict=True):
                self.write(sub, item)
        else:
            raise ValueError(f"type {t} not supported")


class Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def read(self, t: str) -> Any:
        self.pos += -self.pos % ALIGN[t[0]]
        c = t[0]
        if c in FIXED:
            fmt = "<" + FIXED[c]
            (v,) = struct.unpack_from(fmt, self.data, self.pos)
            self.pos += struct.calcsize(fmt)
            return v
        if c in "so":
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            self.pos += 4 + n + 1
            return self.data[self.pos - n - 1 : self.pos - 1].decode()
        if c == "g":
            n = self.data[self.pos]
            self.pos += 1 + n + 1
            return self.data[self.pos - n - 1 : self.pos - 1].decode()
        if c == "v":
            sig = self.read("g")
            return (sig, self.read(sig))
        if c == "a":
            (n,) = struct.unpack_from("<I", self.data, self.pos)
            self.pos += 4
            self.pos += -self.pos % ALIGN[t[1]]
            end, items = self.pos + n, []
            while self.pos < end:
                items.append(self.read(t[1:]))
            return dict(items) if t[1] == "{" else items
        if c in "({":
            return tuple(self.read(sub) for sub in split_signature(t[1:-1]))
        raise ValueError(f"type {t} not supported")


@dataclass
class Message:
    kind: int
    fields: dict[int, Any]
    body: list[Any] = field(default_factory=list)
    serial: int = 0
    fds: list[int] = field(default_factory=list)

    def encode(self, serial: int) -> bytes:
        body = Writer()
        for t, v in zip(split_signature(self.fields.get(SIGNATURE, "")), self.body, strict=True):
            body.write(t, v)
        head = Writer()
        head.buf += struct.pack("<cBBBII", b"l", self.kind, 0, 1, len(body.buf), serial)
        head.write("a(yv)", [(k, (FIELD_TYPES[k], v)) for k, v in sorted(self.fields.items())])
        head.pad(8)
        return bytes(head.buf + body.buf)


def decode(data: bytes) -> tuple[Message, int] | None:
    """One message from the front of data and its length, or None if incomplete."""
    if len(data) < 16:
        return None
    if data[:1] != b"l":
        raise ValueError("big-endian messages not supported")
    kind, _flags, _ver, body_len, serial, fields_len = struct.unpack_from("<BBBIII", data, 1)
    header_end = 16 + fields_len
    total = header_end + (-header_end % 8) + body_len
    if len(data) < total:
        return None
    r = Reader(data, 12)
    fields = {k: v[1] for k, v in r.read("a(yv)")}
    r.pos = total - body_len
    body = [r.read(t) for t in split_signature(fields.get(SIGNATURE, ""))]
    return Message(kind, fields, body, serial), total


class Connection:
    """A client connection to the bus: EXTERNAL auth, Hello, fd passing."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(address)
        self.buf = b""
        self.serial = 0
        self.lock = threading.Lock()
        self.sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
        self._expect(b"OK")
        self.sock.sendall(b"NEGOTIATE_UNIX_FD\r\n")
        self._expect(b"AGREE_UNIX_FD")
        self.sock.sendall(b"BEGIN\r\n")
        self.name = self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                              "org.freedesktop.DBus", "Hello")[0]  # fmt: skip

    def _expect(self, word: bytes) -> None:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("bus closed during authentication")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        if not line.startswith(word):
            raise OSError(f"bus refused: {line!r}")

    def send(self, msg: Message) -> int:
        with self.lock:
            self.serial += 1
            data = msg.encode(self.serial)
            if msg.fds:
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", msg.fds))]
                self.sock.sendmsg([data], anc)
            else:
                self.sock.sendall(data)
            return self.serial

    def receive(self) -> Message:
        while True:
            got = decode(self.buf)
            if got is not None:
                msg, n = got
                self.buf = self.buf[n:]
                return msg
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("bus closed")
            self.buf += chunk

    def call(self, dest: str, path: str, iface: str, member: str, sig: str = "",
             *args: Any) -> list[Any]:  # fmt: skip
        fields = {DESTINATION: dest, PATH: path, INTERFACE: iface, MEMBER: member}
        if sig:
            fields[SIGNATURE] = sig
        serial = self.send(Message(CALL, fields, list(args)))
        while True:
            msg = self.receive()
            if msg.fields.get(REPLY_SERIAL) == serial:
                if msg.kind == ERROR:
                    raise OSError(f"{member}: {msg.fields.get(ERROR_NAME)} {msg.body}")
                return msg.body


SYSTEMD = "org.freedesktop.systemd1"
LOGIND = "org.freedesktop.login1"
PROPS = "org.freedesktop.DBus.Properties"
# Longer than any grace period a spec asks for: the kubelet then never needs to
# rewrite /etc/systemd/logind.conf.d to raise it (which it would do on a host).
INHIBIT_DELAY_MAX_US = 3600 * 1_000_000


def unit_path(name: str) -> str:
    """systemd's object path of a unit: bytes other than [A-Za-z0-9] as _xx."""
    return "/org/freedesktop/systemd1/unit/" + "".join(
        c if c.isascii() and c.isalnum() else f"_{ord(c):02x}" for c in name
    )


class Services:
    """systemd1 and login1 on the private bus, answering from the UnitManager."""

    def __init__(self, bus: Connection, units: UnitManager) -> None:
        self.bus, self.units = bus, units
        self.jobs = 0
        self.inhibitors: list[int] = []  # logind's ends of the inhibitor pipes
        for name in (SYSTEMD, LOGIND):
            (code,) = bus.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                               "org.freedesktop.DBus", "RequestName", "su", name, 4)  # fmt: skip
            if code != 1:
                raise OSError(f"could not own {name} on the private bus ({code})")

    def serve(self) -> None:
        while True:
            try:
                msg = self.bus.receive()
            except OSError:
                return
            if msg.kind == CALL:
                threading.Thread(target=self._answer, args=(msg,), daemon=True).start()

    def _reply(self, msg: Message, sig: str = "", *body: Any, fds: list[int] | None = None) -> None:
        fields: dict[int, Any] = {REPLY_SERIAL: msg.serial, DESTINATION: msg.fields[SENDER]}
        if sig:
            fields[SIGNATURE] = sig
        if fds:
            fields[UNIX_FDS] = len(fds)
        self.bus.send(Message(RETURN, fields, list(body), fds=fds or []))

    def _error(self, msg: Message, name: str, text: str) -> None:
        fields = {REPLY_SERIAL: msg.serial, DESTINATION: msg.fields[SENDER],
                  ERROR_NAME: name, SIGNATURE: "s"}  # fmt: skip
        self.bus.send(Message(ERROR, fields, [text]))

    def _answer(self, msg: Message) -> None:
        member = f"{msg.fields.get(INTERFACE, '')}.{msg.fields.get(MEMBER, '')}"
        try:
            self._dispatch(msg, member)
        except (OSError, ValueError, KeyError) as err:
            self._error(msg, "org.freedesktop.DBus.Error.Failed", f"{member}: {err}")

    def _dispatch(self, msg: Message, member: str) -> None:
        m = "org.freedesktop.systemd1.Manager."
        if member in (m + "Subscribe", m + "Unsubscribe", "org.freedesktop.DBus.Peer.Ping"):
            self._reply(msg)
        elif member == m + "GetUnitByPID":
            name = self.units.unit_by_pid(msg.body[0])
            if not name:
                raise KeyError(f"no unit for PID {msg.body[0]}")
            self._reply(msg, "o", unit_path(name))
        elif member in (m + "StartUnit", m + "StopUnit", m + "RestartUnit"):
            self._job(msg, member.rsplit(".", 1)[1].removesuffix("Unit").lower(), msg.body[0])
        elif member == m + "KillUnit":
            code, out = self.units.dispatch("systemctl", ["kill", f"--signal={msg.body[2]}",
                                                          msg.body[0]], {})  # fmt: skip
            if code:
                raise OSError(out.strip())
            self._reply(msg)
        elif member == PROPS + ".Get":
            self._reply(msg, "v", self._property(msg.fields[PATH], msg.body[1]))
        elif member == "org.freedesktop.login1.Manager.Inhibit":
            read_end, write_end = os.pipe()
            self.inhibitors.append(read_end)
            self._reply(msg, "h", 0, fds=[write_end])
            os.close(write_end)
        else:
            self._error(msg, "org.freedesktop.DBus.Error.UnknownMethod",
                        f"{member} is not implemented by the node e2e stand-in")  # fmt: skip

    def _property(self, path: str, name: str) -> tuple[str, Any]:
        if path == "/org/freedesktop/login1" and name == "InhibitDelayMaxUSec":
            return ("t", INHIBIT_DELAY_MAX_US)
        for unit in list(self.units.units):
            if unit_path(unit) == path and name == "Id":
                return ("s", unit)
        raise KeyError(f"property {name} of {path}")

    def _job(self, msg: Message, verb: str, unit: str) -> None:
        self.jobs += 1
        job = f"/org/freedesktop/systemd1/job/{self.jobs}"
        self._reply(msg, "o", job)
        code, _ = self.units.dispatch("systemctl", [verb, unit], {})
        result = "done" if code == 0 else "failed"
        self.bus.send(Message(SIGNAL, {PATH: "/org/freedesktop/systemd1",
                                       INTERFACE: "org.freedesktop.systemd1.Manager",
                                       MEMBER: "JobRemoved", SIGNATURE: "uoss"},
                              [self.jobs, job, unit, result]))  # fmt: skip


def bus_address(directory: Path) -> str:
    """DBUS_SYSTEM_BUS_ADDRESS of the bus a SystemBus(directory) serves."""
    return f"unix:path={directory / 'system_bus_socket'}"


class SystemBus:
    """dbus-daemon on a private socket, with the stand-in services on it."""

    def __init__(self, directory: Path, units: UnitManager) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.dir / "system_bus_socket")
        self.address = bus_address(directory)
        self.units = units
        self.proc: subprocess.Popen[bytes] | None = None
        self.services: Services | None = None

    def start(self, timeout: float = 10) -> SystemBus:
        config = self.dir / "bus.conf"
        config.write_text(BUS_CONFIG.format(socket=self.socket))
        with open(self.dir / "dbus-daemon.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            conn = self._connect(time.monotonic() + timeout)
        except OSError:
            self.stop()  # the caller has no bus to stop: never leave the daemon behind
            raise
        self.services = Services(conn, self.units)
        threading.Thread(target=self.services.serve, daemon=True).start()
        return self

    def _connect(self, deadline: float) -> Connection:
        """The socket file appears at bind(), before the daemon listens: a
        connection refused in between is retried, not a failed start."""
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise OSError(f"dbus-daemon did not start (see {self.dir}/dbus-daemon.log)")
            if os.path.exists(self.socket):
                try:
                    return Connection(self.socket)
                except ConnectionRefusedError:
                    pass
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self.services is not None:
            self.services.bus.sock.close()
            for fd in self.services.inhibitors:
                os.close(fd)
