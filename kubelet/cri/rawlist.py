"""Raw CRI List responses read without a protobuf message per item.

`container_ids(raw)` takes the bytes of a ListContainersResponse (as
`RuntimeService.list_containers_raw` returns them) and gives the container IDs
in order. At 10,000 containers, building the Container messages in Python only
to read their IDs costs far more than the list call itself; the native version
reads the IDs in place.

Bytes that are not a ListContainersResponse raise ValueError in both versions.
`container_ids` is the Rust one unless KUBELET_IMPL=reference.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError

import kubelet
from kubelet.cri.api import api_pb2 as pb


def reference_container_ids(raw: bytes) -> list[str]:
    try:
        resp = pb.ListContainersResponse.FromString(raw)
    except DecodeError as err:
        raise ValueError(f"undecodable ListContainersResponse: {err}") from err
    return [c.id for c in resp.containers]


def native_container_ids(raw: bytes) -> list[str]:
    import kubelet_native

    return kubelet_native.container_ids(raw)


container_ids: Callable[[bytes], list[str]] = (
    native_container_ids if kubelet.__impl__ == "native" else reference_container_ids
)
