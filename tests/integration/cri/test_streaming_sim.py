"""The simulated runtime refuses exec, attach and port-forward with a clear
UNIMPLEMENTED (it has no streaming server); the kubelet port passes that on as
upstream's streaming.WriteError does: 500 with the gRPC error text."""

from __future__ import annotations

import pytest

from kubelet.cri import errors
from kubelet.cri.remote import RemoteRuntimeService
from kubelet.testing.simruntime import SimRuntimeProc


async def test_streaming_calls_are_unimplemented(simruntime: SimRuntimeProc) -> None:
    rt = RemoteRuntimeService(simruntime.endpoint, timeout=5)
    try:
        calls = [
            rt.exec("c1", ["sh"], tty=False, stdin=True, stdout=True, stderr=False),
            rt.attach("c1", tty=False, stdin=False, stdout=True, stderr=False),
            rt.port_forward("s1", [80]),
        ]
        for call, what in zip(calls, ("exec", "attach", "port-forward"), strict=True):
            with pytest.raises(errors.UnimplementedError) as info:
                await call
            assert info.value.message == f"{what} is not supported by the simulated runtime"
    finally:
        await rt.close()
