"""Native fnv32a == the pure-Python reference (checkpoint checksums)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.checkpointmanager.checksum import native_fnv32a, reference_fnv32a  # noqa: E402


@given(st.binary(max_size=4096))
def test_native_fnv32a_equals_reference(data: bytes) -> None:
    assert native_fnv32a(data) == reference_fnv32a(data)


@given(st.text(max_size=512))
def test_the_same_on_checkpoint_text(text: str) -> None:
    # What the checkpoints hash: spew text of Go strings, any code point.
    data = f"(string){text}".encode("utf-8", "surrogatepass")
    assert native_fnv32a(data) == reference_fnv32a(data)


def test_published_vectors() -> None:
    for data, want in ((b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)):
        assert native_fnv32a(data) == want == reference_fnv32a(data)
