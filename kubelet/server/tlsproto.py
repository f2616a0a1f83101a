"""TLS for the kubelet port whose sessions a streaming relay thread can take over.

The loop's TLS layer is asyncio's own SSLProtocol (the one a plain asyncio loop
uses; uvloop's equivalent keeps its SSLObject out of reach): an SSLObject over
two memory BIOs. An exec, attach or port-forward hands that SSLObject and its
BIOs to its relay thread (kubelet/server/relay.py) and leaves the protocol
UNWRAPPED, a state in which it never touches them again.

The handshake's crypto (a signature and a key exchange per connection, a few
ms of CPU each) runs on a small thread pool, not on the loop: when the API
server opens a connection per exec, a loop doing handshakes is a loop not
relisting. While a step runs there, the thread owns the SSLObject and its BIOs;
bytes that arrive meanwhile are held, and a lost connection is seen after the
step returns.

The names used here are asyncio.sslproto's (CPython 3.11 to 3.13); they are
checked on import, so a Python that changes them fails loudly at start-up rather
than corrupting a session at the first exec.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from asyncio import sslproto
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, cast

from aiohttp import web

from kubelet.server.relay import TLSState

_NEEDED = (
    "_sslobj", "_incoming", "_outgoing", "_transport", "_state", "_write_backlog",
    "_ssl_buffer_view", "_process_outgoing", "_on_handshake_complete",
)  # fmt: skip
_AGAIN = "again"  # the step wants more bytes from the peer


class DetachableTLS(sslproto.SSLProtocol):
    """asyncio's server-side TLS protocol, its handshake on `handshakes`, plus
    a hand-over of its session."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app: asyncio.BaseProtocol,
        ctx: ssl.SSLContext,
        handshakes: Executor,
    ) -> None:
        super().__init__(loop, app, ctx, cast(Any, None), server_side=True)
        self._handshakes = handshakes
        self._stepping = False  # a handshake step runs on the pool
        self._held: list[bytes] = []  # bytes that came in meanwhile
        self._lost: list[BaseException | None] = []  # connection_lost meanwhile

    def buffer_updated(self, nbytes: int) -> None:
        if self._stepping:
            me: Any = self
            self._held.append(bytes(me._ssl_buffer_view[:nbytes]))
            return
        super().buffer_updated(nbytes)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._stepping:  # it drains the outgoing BIO the thread writes
            self._lost.append(exc)
            return
        super().connection_lost(exc)

    def _do_handshake(self) -> None:
        if self._stepping:
            return
        me: Any = self
        try:
            step = self._handshakes.submit(_handshake_step, me._sslobj)
        except RuntimeError:  # the pool is shut down: the server is stopping
            me._on_handshake_complete(ConnectionAbortedError("server stopped"))
            return
        self._stepping = True
        step.add_done_callback(self._step_done)

    def _step_done(self, step: Future[BaseException | str | None]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._stepped, step)
        except RuntimeError:
            pass  # the loop is closed: no connection to carry on

    def _stepped(self, step: Future[BaseException | str | None]) -> None:
        self._stepping = False
        me: Any = self
        if self._lost:
            super().connection_lost(self._lost[0])
            return
        if me._state is not sslproto.SSLProtocolState.DO_HANDSHAKE:
            return  # timed out or aborted while the step ran
        held, self._held = self._held, []
        for data in held:
            me._incoming.write(data)
        result = ConnectionAbortedError("server stopped") if step.cancelled() else step.result()
        if result == _AGAIN:
            me._process_outgoing()
            if held:
                self._do_handshake()
        else:
            me._on_handshake_complete(result)

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
    probe: Any = DetachableTLS(nothing, asyncio.Protocol(), ctx, nothing)
    probe._get_app_transport().close()  # nothing to shut down
    missing = [n for n in _NEEDED if not hasattr(probe, n)]
    if missing or not hasattr(sslproto.SSLProtocolState, "WRAPPED"):
        raise ImportError(f"asyncio.sslproto lacks {missing or ['SSLProtocolState.WRAPPED']}")


_check()


def tls_protocol_of(transport: asyncio.BaseTransport) -> DetachableTLS | None:
    """The TLS protocol under an application transport, or None for plain TCP."""
    proto = getattr(transport, "_ssl_protocol", None)
    return proto if isinstance(proto, DetachableTLS) else None


def _handshake_step(sslobj: ssl.SSLObject) -> BaseException | str | None:
    """One handshake step off the loop (OpenSSL releases the GIL): None when
    done, _AGAIN when it waits for the peer, or the error that ended it."""
    try:
        sslobj.do_handshake()
    except (ssl.SSLWantReadError, ssl.SSLSyscallError):
        return _AGAIN
    except ssl.SSLError as e:
        return e
    return None


class TLSSite(web.TCPSite):
    """aiohttp's TCP site, its TLS layer DetachableTLS instead of the loop's,
    with the pool its handshakes run on (as many threads as cores)."""

    __slots__ = ("_handshakes",)

    def __init__(self, runner: web.BaseRunner, *args: Any, **kw: Any) -> None:
        super().__init__(runner, *args, **kw)
        self._handshakes = ThreadPoolExecutor(
            max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="tls-handshake"
        )

    async def stop(self) -> None:
        await super().stop()
        self._handshakes.shutdown(wait=False, cancel_futures=True)

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        ctx = self._ssl_context
        assert server is not None and ctx is not None

        def factory() -> DetachableTLS:
            return DetachableTLS(loop, server(), ctx, self._handshakes)

        self._server = await loop.create_server(
            factory, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port,
        )  # fmt: skip
        sockets = getattr(self._server, "sockets", None)
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
