"""Native container_ids == pure-Python reference on generated ListContainersResponses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kubelet

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.cri.api import api_pb2 as pb  # noqa: E402
from kubelet.cri.rawlist import native_container_ids, reference_container_ids  # noqa: E402

STATES = [pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_EXITED, pb.CONTAINER_UNKNOWN, 7]
text = st.text(max_size=12)


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# Fields no CRI message here defines, one of each wire type the runtime could send.
unknown_field = st.one_of(
    st.builds(lambda f, v: varint(f << 3) + varint(v), st.integers(20, 999), st.integers(0, 2**64 - 1)),
    st.builds(lambda f, b: varint(f << 3 | 1) + b, st.integers(20, 999), st.binary(min_size=8, max_size=8)),
    st.builds(lambda f, b: varint(f << 3 | 5) + b, st.integers(20, 999), st.binary(min_size=4, max_size=4)),
    st.builds(
        lambda f, b: varint(f << 3 | 2) + varint(len(b)) + b,
        st.integers(20, 999),
        st.binary(max_size=16),
    ),
)  # fmt: skip

container = st.builds(
    lambda cid, sid, name, attempt, image, state, created, labels, annotations: pb.Container(
        id=cid,
        pod_sandbox_id=sid,
        metadata=pb.ContainerMetadata(name=name, attempt=attempt),
        image=pb.ImageSpec(image=image),
        image_ref=image,
        state=state,
        created_at=created,
        labels=labels,
        annotations=annotations,
    ),
    text,
    text,
    text,
    st.integers(0, 2**32 - 1),
    text,
    st.sampled_from(STATES),
    st.integers(-(2**63), 2**63 - 1),
    st.dictionaries(st.sampled_from(["io.kubernetes.pod.uid", "app", ""]) | text, text, max_size=4),
    st.dictionaries(text, text, max_size=3),
)
# An item: a Container, with unknown fields appended to it; and unknown
# top-level fields before it.
item = st.tuples(
    container, st.lists(unknown_field, max_size=2), st.lists(unknown_field, max_size=2)
)


def encode(items: list[tuple[pb.Container, list[bytes], list[bytes]]]) -> bytes:
    out = bytearray()
    for c, inner, outer in items:
        body = c.SerializeToString() + b"".join(inner)
        out += b"".join(outer) + b"\x0a" + varint(len(body)) + body
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(item, max_size=8))
def test_same_ids_in_the_same_order(items: list) -> None:
    raw = encode(items)
    ids = native_container_ids(raw)
    assert ids == reference_container_ids(raw)
    assert ids == [c.id for c, _, _ in items]


def test_a_plain_serialized_response_and_the_empty_one() -> None:
    assert native_container_ids(b"") == reference_container_ids(b"") == []
    raw = pb.ListContainersResponse(
        containers=[
            pb.Container(id=f"c{i}", labels={"io.kubernetes.pod.uid": "u"}) for i in range(3)
        ]
    ).SerializeToString()
    assert native_container_ids(raw) == reference_container_ids(raw) == ["c0", "c1", "c2"]


@pytest.mark.parametrize(
    "junk",
    [
        b"\x0a\x05abc",  # an item longer than the buffer
        b"\x0a",  # a tag without its length
        b"\x07\x01",  # wire type 7
        b"\x00\x01",  # field number 0
        b"\x0a\x04\x0a\x02\xff\xfe",  # an ID that is not UTF-8
        b"\xff" * 11,  # a varint too long
    ],
)
def test_garbage_is_a_value_error_in_both(junk: bytes) -> None:
    with pytest.raises(ValueError, match="undecodable ListContainersResponse"):
        native_container_ids(junk)
    with pytest.raises(ValueError, match="undecodable ListContainersResponse"):
        reference_container_ids(junk)


def _mutations(raw: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(0, len(raw)).map(lambda n: raw[:n]),
        st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)).map(
            lambda p: raw[: p[0]] + bytes([p[1]]) + raw[p[0] + 1 :]
        ),
    )


VALID = encode(
    [(pb.Container(id="abc", state=pb.CONTAINER_RUNNING, labels={"a": "b"}), [], [])] * 3
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=64), _mutations(VALID)))
def test_arbitrary_bytes_never_crash_and_agree_when_both_decode(junk: bytes) -> None:
    try:
        ids = native_container_ids(junk)
    except ValueError:
        return  # rejected cleanly (a panic would surface as another exception type)
    assert isinstance(ids, list) and all(isinstance(i, str) for i in ids)
    try:
        ref = reference_container_ids(junk)
    except ValueError:
        return  # native reads only what it needs; the reference checks every field
    assert ids == ref
