"""The private system bus of the node e2e harness: Debian's dbus-daemon with
the systemd1 and login1 stand-ins, called as go-systemd and the kubelet call them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from benches.node_e2e import dbus
from benches.node_e2e.systemd import UnitManager
from kubelet.testing.parts import part_unavailable


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[tuple[dbus.SystemBus, list[str]]]:
    if shutil.which("dbus-daemon") is None:
        part_unavailable("dbus-daemon", "not installed (run hack/parts/node-e2e.sh)")
    units = UnitManager(tmp_path / "systemd").start()
    calls: list[str] = []
    units.add_external("containerd.service", 4242, lambda: _record(calls, "start", 4343),
                       lambda: calls.append("stop"))  # fmt: skip
    system_bus = dbus.SystemBus(tmp_path / "bus", units).start()
    try:
        yield system_bus, calls
    finally:
        system_bus.stop()
        units.close()


def test_marshalling_round_trip() -> None:
    msg = dbus.Message(dbus.SIGNAL, {dbus.PATH: "/a", dbus.MEMBER: "M", dbus.SIGNATURE: "uosa{sv}bt"},
                       [7, "/o/p", "x", {"k": ("s", "v"), "n": ("u", 3)}, True, 2**40])  # fmt: skip
    decoded = dbus.decode(msg.encode(serial=9) + b"extra")
    assert decoded is not None
    back, n = decoded
    assert n == len(msg.encode(serial=9))
    assert (back.serial, back.body) == (
        9,
        [7, "/o/p", "x", {"k": ("s", "v"), "n": ("u", 3)}, 1, 2**40],
    )


def test_unit_path_escapes_like_systemd() -> None:
    assert (
        dbus.unit_path("containerd.service")
        == "/org/freedesktop/systemd1/unit/containerd_2eservice"
    )


def test_runtime_stop_start_as_go_systemd_does(bus: tuple[dbus.SystemBus, list[str]]) -> None:
    system_bus, calls = bus
    sig = dbus.Connection(system_bus.socket)
    sig.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", "s",
             "type='signal',interface='org.freedesktop.systemd1.Manager',member='JobRemoved'")  # fmt: skip
    conn = dbus.Connection(system_bus.socket)
    (path,) = conn.call(dbus.SYSTEMD, "/org/freedesktop/systemd1",
                        "org.freedesktop.systemd1.Manager", "GetUnitByPID", "u", 4242)  # fmt: skip
    (unit_id,) = conn.call(dbus.SYSTEMD, path, dbus.PROPS, "Get", "ss",
                           "org.freedesktop.systemd1.Unit", "Id")  # fmt: skip
    assert unit_id == ("s", "containerd.service")
    (job,) = conn.call(dbus.SYSTEMD, "/org/freedesktop/systemd1",
                       "org.freedesktop.systemd1.Manager", "StopUnit", "ss", "containerd.service", "replace")  # fmt: skip
    while True:
        msg = sig.receive()
        if msg.kind == dbus.SIGNAL and msg.fields.get(dbus.MEMBER) == "JobRemoved":
            break
    assert msg.body[1:] == [job, "containerd.service", "done"]
    assert calls == ["stop"]


def test_logind_inhibit_and_prepare_for_shutdown(bus: tuple[dbus.SystemBus, list[str]]) -> None:
    system_bus, _ = bus
    kubelet = dbus.Connection(system_bus.socket)
    (delay,) = kubelet.call(dbus.LOGIND, "/org/freedesktop/login1", dbus.PROPS, "Get", "ss",
                            "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec")  # fmt: skip
    assert delay == ("t", dbus.INHIBIT_DELAY_MAX_US)
    serial = kubelet.send(dbus.Message(dbus.CALL, {
        dbus.DESTINATION: dbus.LOGIND, dbus.PATH: "/org/freedesktop/login1",
        dbus.INTERFACE: "org.freedesktop.login1.Manager", dbus.MEMBER: "Inhibit",
        dbus.SIGNATURE: "ssss"}, ["shutdown", "kubelet", "why", "delay"]))  # fmt: skip
    while True:
        reply = kubelet.receive()
        if reply.fields.get(dbus.REPLY_SERIAL) == serial:
            break
    assert reply.kind == dbus.RETURN and reply.fields[dbus.UNIX_FDS] == 1 and reply.body == [0]
    # The shutdown specs emit PrepareForShutdown themselves; the kubelet hears it.
    kubelet.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", "s",
                 "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown'")  # fmt: skip
    test = dbus.Connection(system_bus.socket)
    test.send(dbus.Message(dbus.SIGNAL, {dbus.PATH: "/org/freedesktop/login1",
                                         dbus.INTERFACE: "org.freedesktop.login1.Manager",
                                         dbus.MEMBER: "PrepareForShutdown", dbus.SIGNATURE: "b"}, [True]))  # fmt: skip
    while True:
        msg = kubelet.receive()
        if msg.fields.get(dbus.MEMBER) == "PrepareForShutdown":
            break
    assert msg.body == [1]


def _record(calls: list[str], what: str, pid: int) -> int:
    calls.append(what)
    return pid
