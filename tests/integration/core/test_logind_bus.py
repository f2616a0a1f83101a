"""The kubelet's logind client (kubelet/nodeshutdown/systemd.py) on a real
D-Bus system bus (Debian's dbus-daemon) with the logind stand-in: the
property, the drop-in and the reload, a delay lock that lives as long as its
fd, the PrepareForShutdown signal (from logind, and from any client as
upstream's node e2e tests send it), and the end of the connection."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.nodeshutdown import systemd
from kubelet.testing import login1
from tests.fixtures.dbus import Logind


async def inhibitors(bus_address: str) -> list[list[object]]:
    (rows,) = await login1.call(bus_address, "ListInhibitors", systemd.LOGIND_INTERFACE)
    return [list(r) for r in rows]


async def eventually(check: Any) -> Any:
    """check()'s first true answer within 2 s (the stand-in sees a closed fd
    on its next loop turn); the last one otherwise."""
    for _ in range(100):
        if got := await check():
            return got
        await asyncio.sleep(0.02)
    return await check()


async def test_inhibit_delay_is_read_raised_and_reloaded(logind: Logind) -> None:
    con = await systemd.DBusCon.connect(logind.bus.address)
    try:
        assert await con.current_inhibit_delay() == 5.0  # logind's default
        systemd.override_inhibit_delay(90, os.path.join(logind.conf_dir, "logind.conf.d"))
        assert await con.current_inhibit_delay() == 5.0  # not before the reload
        await con.reload_logind_conf()
        assert await con.current_inhibit_delay() == 90.0
    finally:
        con.close()


async def test_the_delay_lock_lives_as_long_as_its_fd(logind: Logind) -> None:
    address = logind.bus.address
    con = await systemd.DBusCon.connect(address)
    try:
        fd = await con.inhibit_shutdown()
        rows = await inhibitors(address)
        assert len(rows) == 1
        assert rows[0][:4] == [
            "shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay",
        ]  # fmt: skip
        assert rows[0][5] == os.getpid()
        con.release_inhibit_lock(fd)

        async def gone() -> bool:
            return not await inhibitors(address)

        assert await eventually(gone)
    finally:
        con.close()


async def test_power_off_signals_and_waits_for_the_lock(logind: Logind) -> None:
    address = logind.bus.address
    con = await systemd.DBusCon.connect(address)
    try:
        fd = await con.inhibit_shutdown()
        events = await con.monitor_shutdown()
        await login1.call(address, "PowerOff", systemd.LOGIND_INTERFACE, "b", [False])
        assert await asyncio.wait_for(events.get(), 5) is True
        start, end, timed_out = await login1.call(address, "LastShutdown")
        assert end == 0  # logind is still waiting for the lock
        con.release_inhibit_lock(fd)

        async def done() -> Any:
            last = await login1.call(address, "LastShutdown")
            return last if last[1] else None

        start, end, timed_out = await eventually(done)
        assert start <= end and not timed_out
        await login1.call(address, "EmitPrepareForShutdown", sig="b", body=[False])
        assert await asyncio.wait_for(events.get(), 5) is False
    finally:
        con.close()


async def test_a_signal_from_another_sender_is_acted_on_with_a_warning(
    logind: Logind, caplog: pytest.LogCaptureFixture
) -> None:
    con = await systemd.DBusCon.connect(logind.bus.address)
    try:
        events = await con.monitor_shutdown()
        with caplog.at_level(logging.WARNING):
            await login1.emit_as_client(logind.bus.address, True)
            assert await asyncio.wait_for(events.get(), 5) is True
        assert "not from logind" in caplog.text
    finally:
        con.close()


async def test_the_end_of_the_bus_ends_the_watch(logind: Logind) -> None:
    con = await systemd.DBusCon.connect(logind.bus.address)
    events = await con.monitor_shutdown()
    logind.proc.stop()
    logind.bus.stop()
    assert await asyncio.wait_for(events.get(), 10) is None
    con.close()


async def test_no_bus_at_the_address_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await systemd.DBusCon.connect(f"unix:path={tmp_path}/nothing-here")


async def test_logind_errors_are_reported(logind: Logind) -> None:
    con = await systemd.DBusCon.connect(logind.bus.address)
    try:
        with pytest.raises(systemd.DBusCallError, match="UnknownProperty"):
            await con._call(
                systemd.LOGIND_SERVICE, systemd.LOGIND_OBJECT, systemd.PROPERTIES_INTERFACE,
                "Get", "ss", [systemd.LOGIND_INTERFACE, "NoSuchThing"],
            )  # fmt: skip
    finally:
        con.close()
