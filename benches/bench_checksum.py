"""The checkpoint checksum (FNV-1a 32) of an allocation checkpoint at 1,000 and
5,000 pods, native vs the pure-Python reference: every write of the allocated
and actuated checkpoints hashes the whole file's data."""

from __future__ import annotations

import pytest

from kubelet.allocation.state import encode_data
from kubelet.checkpointmanager.checksum import native_fnv32a, reference_fnv32a

SIZES = [1000, 5000]
IMPLS = {"native": native_fnv32a, "reference": reference_fnv32a}


def data(n: int) -> bytes:
    entries = {
        f"{i:08x}-0000-4000-8000-{i:012x}": {
            "app": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
        }
        for i in range(n)
    }
    return ("(string)" + encode_data(entries)).encode()  # type: ignore[arg-type]


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_fnv32a(benchmark, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"fnv32a_{n}"
    benchmark.extra_info["impl"] = impl
    blob = data(n)
    got = benchmark(IMPLS[impl], blob)
    assert got == native_fnv32a(blob)
