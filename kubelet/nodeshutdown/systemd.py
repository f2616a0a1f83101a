"""logind over the D-Bus system bus (nodeshutdown/systemd upstream).

The bus is found as sd-bus finds it: $DBUS_SYSTEM_BUS_ADDRESS, else
/run/dbus/system_bus_socket. What the kubelet asks of logind: the
InhibitDelayMaxUSec property, a "delay" inhibitor for "shutdown" (an fd that
holds the lock while it is open), the PrepareForShutdown signal, and, to have
a raised InhibitDelayMaxSec read again, a SIGHUP to systemd-logind.service
through systemd's KillUnit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any

# dbus_fast (and the XML parser it loads) is imported when a connection is
# made, i.e. only on nodes with graceful shutdown configured: a few MiB of
# every other kubelet's RSS.
if TYPE_CHECKING:
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

log = logging.getLogger(__name__)

LOGIND_SERVICE = "org.freedesktop.login1"
LOGIND_OBJECT = "/org/freedesktop/login1"
LOGIND_INTERFACE = "org.freedesktop.login1.Manager"
SYSTEMD_SERVICE = "org.freedesktop.systemd1"
SYSTEMD_OBJECT = "/org/freedesktop/systemd1"
SYSTEMD_INTERFACE = "org.freedesktop.systemd1.Manager"
PROPERTIES_INTERFACE = "org.freedesktop.DBus.Properties"
BUS_SERVICE = "org.freedesktop.DBus"
BUS_OBJECT = "/org/freedesktop/DBus"

DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"
LOGIND_CONF_DIR = "/etc/systemd/logind.conf.d/"
KUBELET_LOGIND_CONF = "99-kubelet.conf"
CALL_TIMEOUT = 25.0  # sd-bus's default method call timeout

SHUTDOWN_MATCH = (
    f"type='signal',interface='{LOGIND_INTERFACE}',member='PrepareForShutdown',"
    f"path='{LOGIND_OBJECT}'"
)


class DBusCallError(Exception):
    """A D-Bus call answered with an error (or not at all)."""


def system_bus_address() -> str:
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS


class DBusCon:
    """One connection to the system bus, used by the shutdown manager (DBusCon upstream)."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self._watch: asyncio.Future[None] | None = None

    @classmethod
    async def connect(cls, address: str | None = None) -> DBusCon:
        """Raises OSError (no bus there) or DBusCallError (authentication)."""
        from dbus_fast import BusType
        from dbus_fast.aio import MessageBus
        from dbus_fast.errors import DBusFastError

        bus = MessageBus(
            bus_address=address or system_bus_address(),
            bus_type=BusType.SYSTEM,
            negotiate_unix_fd=True,
        )
        try:
            await asyncio.wait_for(bus.connect(), CALL_TIMEOUT)
        except DBusFastError as err:
            raise DBusCallError(f"connecting to the system bus: {err}") from None
        return cls(bus)

    def close(self) -> None:
        self.bus.disconnect()

    async def _call(
        self, dest: str, path: str, iface: str, member: str, sig: str = "", body: Any = ()
    ) -> Message:
        from dbus_fast import Message, MessageType
        from dbus_fast.errors import DBusFastError

        msg = Message(
            destination=dest, path=path, interface=iface, member=member, signature=sig,
            body=list(body),
        )  # fmt: skip
        try:
            reply = await asyncio.wait_for(self.bus.call(msg), CALL_TIMEOUT)
        except TimeoutError:
            raise DBusCallError(f"{iface}.{member}: no reply within {CALL_TIMEOUT:.0f}s") from None
        except (OSError, EOFError, DBusFastError) as err:
            # The connection went away under the call.
            raise DBusCallError(f"{iface}.{member}: {err or type(err).__name__}") from None
        if reply.message_type is MessageType.ERROR:
            for fd in reply.unix_fds:
                os.close(fd)
            text = reply.body[0] if reply.body else ""
            raise DBusCallError(f"{reply.error_name}: {text}")
        return reply

    async def current_inhibit_delay(self) -> float:
        """logind's InhibitDelayMaxUSec, in seconds."""
        try:
            reply = await self._call(
                LOGIND_SERVICE, LOGIND_OBJECT, PROPERTIES_INTERFACE, "Get", "ss",
                [LOGIND_INTERFACE, "InhibitDelayMaxUSec"],
            )  # fmt: skip
        except DBusCallError as err:
            raise DBusCallError(
                f"failed reading InhibitDelayMaxUSec property from logind: {err}"
            ) from None
        variant = reply.body[0]
        if variant.signature != "t":
            raise DBusCallError("InhibitDelayMaxUSec from logind is not a uint64 as expected")
        return int(variant.value) / 1e6

    async def inhibit_shutdown(self) -> int:
        """A delay inhibitor for shutdown: the returned fd holds it until closed."""
        try:
            reply = await self._call(
                LOGIND_SERVICE, LOGIND_OBJECT, LOGIND_INTERFACE, "Inhibit", "ssss",
                ["shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay"],
            )  # fmt: skip
        except DBusCallError as err:
            raise DBusCallError(f"failed creating systemd inhibitor: {err}") from None
        fds = list(reply.unix_fds)
        index = reply.body[0] if reply.body else -1
        if not isinstance(index, int) or not 0 <= index < len(fds):
            for fd in fds:
                os.close(fd)
            raise DBusCallError("failed storing inhibit lock file descriptor: none was passed")
        for i, fd in enumerate(fds):
            if i != index:
                os.close(fd)
        return int(fds[index])

    @staticmethod
    def release_inhibit_lock(fd: int) -> None:
        """Closing the fd lets logind go on with the shutdown."""
        try:
            os.close(fd)
        except OSError as err:
            raise DBusCallError(f"unable to close systemd inhibitor lock: {err}") from None

    async def reload_logind_conf(self) -> None:
        """SIGHUP to systemd-logind.service: logind reads its drop-ins again."""
        try:
            await self._call(
                SYSTEMD_SERVICE, SYSTEMD_OBJECT, SYSTEMD_INTERFACE, "KillUnit", "ssi",
                ["systemd-logind.service", "all", 1],
            )  # fmt: skip
        except DBusCallError as err:
            raise DBusCallError(f"unable to reload logind conf: {err}") from None

    async def monitor_shutdown(self) -> asyncio.Queue[bool | None]:
        """PrepareForShutdown's argument, one item per signal; None once the
        connection is gone. Signals from another sender than logind are acted
        on, as upstream (its node e2e tests emit them), with a warning."""
        await self._call(BUS_SERVICE, BUS_OBJECT, BUS_SERVICE, "AddMatch", "s", [SHUTDOWN_MATCH])
        events: asyncio.Queue[bool | None] = asyncio.Queue()
        owner: list[str] = []

        from dbus_fast import MessageType

        def handler(msg: Message) -> None:
            if (
                msg.message_type is not MessageType.SIGNAL
                or msg.interface != LOGIND_INTERFACE
                or msg.member != "PrepareForShutdown"
                or msg.path != LOGIND_OBJECT
            ):
                return
            if not msg.body or not isinstance(msg.body[0], bool):
                log.error("Failed obtaining shutdown event, PrepareForShutdown event was not bool")
                return
            if owner and msg.sender != owner[0]:
                log.warning(
                    "PrepareForShutdown(%s) came from %s, not from logind (%s)",
                    msg.body[0], msg.sender, owner[0],
                )  # fmt: skip
            events.put_nowait(msg.body[0])

        with contextlib.suppress(DBusCallError):
            reply = await self._call(
                BUS_SERVICE, BUS_OBJECT, BUS_SERVICE, "GetNameOwner", "s", [LOGIND_SERVICE]
            )
            owner.append(str(reply.body[0]))
        self.bus.add_message_handler(handler)

        async def on_disconnect() -> None:
            with contextlib.suppress(Exception):
                await self.bus.wait_for_disconnect()
            events.put_nowait(None)

        self._watch = asyncio.ensure_future(on_disconnect())
        return events


def override_inhibit_delay(seconds: float, conf_dir: str = LOGIND_CONF_DIR) -> None:
    """A logind drop-in raising InhibitDelayMaxSec (logind reads it on SIGHUP)."""
    try:
        os.makedirs(conf_dir, mode=0o755, exist_ok=True)
    except OSError as err:
        raise OSError(f"failed creating {conf_dir} directory: {err}") from None
    text = f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={seconds:.0f}\n"
    path = os.path.join(conf_dir, KUBELET_LOGIND_CONF)
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(dir=conf_dir, prefix=".tmp-" + KUBELET_LOGIND_CONF)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise OSError(
            f"failed writing logind shutdown inhibit override file {path}: {err}"
        ) from None
