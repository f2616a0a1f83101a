"""Waiting for the attach-detach controller (WaitForAttach upstream): a
volume whose driver requires attach is staged only once its VolumeAttachment
`csi-<sha256(handle+driver+node)>` reports attached; its attachment metadata
is the publish context handed to NodeStage and NodePublish.

Nodes may only GET VolumeAttachments (the Node authorizer), so this polls,
starting fast (an attach by external-attacher takes about a second) and
backing off to a few seconds, for at most the CSI timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubelet.client.rest import APIClient, APIError
from kubelet.util.clock import REAL_CLOCK, Clock
from kubelet.volume import VolumeError
from kubelet.volume.csi import paths

PATH = "/apis/storage.k8s.io/v1/volumeattachments/"
POLL_INITIAL = 0.2
POLL_MAX = 2.0
ATTACH_TIMEOUT = 120.0


class AttachError(VolumeError):
    pass


def attachment_status(va: dict[str, Any], handle: str) -> dict[str, str] | None:
    """The publish context once attached, None while not yet; raises
    AttachError when the attachment failed or is going away."""
    if (va.get("metadata") or {}).get("deletionTimestamp"):
        raise AttachError("volume attachment is being deleted")
    st = va.get("status") or {}
    if st.get("attached"):
        return {str(k): str(v) for k, v in (st.get("attachmentMetadata") or {}).items()}
    err = st.get("attachError") or {}
    if err.get("message"):
        raise AttachError(str(err["message"]))
    return None


async def wait_for_attach(
    client: APIClient,
    driver: str,
    handle: str,
    node: str,
    timeout: float = ATTACH_TIMEOUT,
    clock: Clock = REAL_CLOCK,
) -> dict[str, str]:
    name = paths.attachment_name(handle, driver, node)
    deadline = clock.monotonic() + timeout
    delay = POLL_INITIAL
    last = f"volume {handle} is not attached for volume attachment {name}"
    while True:
        try:
            ctx = attachment_status(await client.get(PATH + name), handle)
            if ctx is not None:
                return ctx
            last = f"volume {handle} is not attached for volume attachment {name}"
        except APIError as err:
            if not err.not_found:
                raise AttachError(
                    f"volume {handle} has GET error for volume attachment {name}: {err}"
                ) from err
            last = f"volume attachment {name} for volume {handle} does not exist yet"
        if clock.monotonic() + delay > deadline:
            raise AttachError(f"timed out waiting for attach: {last}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, POLL_MAX)
