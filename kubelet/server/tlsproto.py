"""TLS for the kubelet port whose sessions a streaming relay thread can take over.

The loop's TLS layer is asyncio's own SSLProtocol (the one a plain asyncio loop
uses; uvloop's equivalent keeps its SSLObject out of reach): an SSLObject over
two memory BIOs. An exec, attach or port-forward hands that SSLObject and its
BIOs to its relay thread (kubelet/server/relay.py) and leaves the protocol
UNWRAPPED, a state in which it never touches them again.

The names used here are asyncio.sslproto's (CPython 3.11 to 3.13); they are
checked on import, so a Python that changes them fails loudly at start-up rather
than corrupting a session at the first exec.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from typing import Any, cast

from aiohttp import web

from kubelet.server.relay import TLSState

_NEEDED = ("_sslobj", "_incoming", "_outgoing", "_transport", "_state", "_write_backlog")


class DetachableTLS(sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol, plus a hand-over of its session."""

    # The stubs do not know asyncio.sslproto's private names: `me` reads them.
    @property
    def transport(self) -> asyncio.Transport:
        """The TCP transport under the TLS layer."""
        me: Any = self
        return cast(asyncio.Transport, me._transport)

    def backlog(self) -> bool:
        """Whether written plaintext still waits to be encrypted."""
        me: Any = self
        return bool(me._write_backlog)

    def detach(self) -> TLSState:
        """The session, for a thread to carry on; this protocol goes inert."""
        me: Any = self
        if me._state is not sslproto.SSLProtocolState.WRAPPED:
            raise ConnectionResetError(f"TLS connection is {me._state.name.lower()}")
        state = TLSState(me._sslobj, me._incoming, me._outgoing)
        # UNWRAPPED: writes are dropped, reads and shutdown do nothing (asyncio's
        # own rules for that state), so the thread is the session's only user.
        me._set_state(sslproto.SSLProtocolState.UNWRAPPED)
        return state


def _check() -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    nothing: Any = None  # never connected: no loop, no waiter
    probe: Any = DetachableTLS(nothing, asyncio.Protocol(), ctx, nothing, server_side=True)
    probe._get_app_transport().close()  # nothing to shut down
    missing = [n for n in _NEEDED if not hasattr(probe, n)]
    if missing or not hasattr(sslproto.SSLProtocolState, "WRAPPED"):
        raise ImportError(f"asyncio.sslproto lacks {missing or ['SSLProtocolState.WRAPPED']}")


_check()


def tls_protocol_of(transport: asyncio.BaseTransport) -> DetachableTLS | None:
    """The TLS protocol under an application transport, or None for plain TCP."""
    proto = getattr(transport, "_ssl_protocol", None)
    return proto if isinstance(proto, DetachableTLS) else None


class TLSSite(web.TCPSite):
    """aiohttp's TCP site, its TLS layer DetachableTLS instead of the loop's."""

    __slots__ = ()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        ctx = self._ssl_context
        assert server is not None and ctx is not None

        def factory() -> DetachableTLS:
            return DetachableTLS(loop, server(), ctx, cast(Any, None), server_side=True)

        self._server = await loop.create_server(
            factory, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port,
        )  # fmt: skip
        sockets = getattr(self._server, "sockets", None)
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
