"""What goes into NodeStage and NodePublish besides the volume itself
(csi_mounter.go, csi_util.go upstream): the volume capability, the pod info
and service-account tokens some drivers ask for in the volume context,
secrets from the API, and whether the kubelet applies fsGroup itself.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

from kubelet.client.rest import API_ERRORS, APIClient, APIError
from kubelet.token.manager import BoundObjectRef, TokenManager, TokenRequestSpec
from kubelet.types import Pod
from kubelet.volume import VolumeError
from kubelet.volume.csi import csidriver, paths
from kubelet.volume.csi.api import csi_pb2 as pb
from kubelet.volume.csi.source import CSIVolume, SecretRef

POD_NAME = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE = "csi.storage.k8s.io/pod.namespace"
POD_UID = "csi.storage.k8s.io/pod.uid"
SERVICE_ACCOUNT = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL = "csi.storage.k8s.io/ephemeral"
TOKENS = "csi.storage.k8s.io/serviceAccount.tokens"


def capability(
    vol: CSIVolume, single_node_multi_writer: bool, mount_group: str = ""
) -> pb.VolumeCapability:
    mode = vol.csi_access_mode(single_node_multi_writer)
    if vol.volume_mode == paths.BLOCK:
        # A raw device: no filesystem, mount flags or group (csi_block.go).
        return pb.VolumeCapability(
            block=pb.VolumeCapability.BlockVolume(),
            access_mode=pb.VolumeCapability.AccessMode(mode=mode),
        )
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(
            fs_type=vol.fs_type,
            mount_flags=list(vol.mount_options),
            volume_mount_group=mount_group,
        ),
        # An enum field takes its value's name (an unknown one raises ValueError).
        access_mode=pb.VolumeCapability.AccessMode(mode=mode),
    )


def pod_info(pod: Pod, vol: CSIVolume) -> dict[str, str]:
    meta = pod["metadata"]
    return {
        POD_NAME: str(meta.get("name", "")),
        POD_NAMESPACE: str(meta.get("namespace", "")),
        POD_UID: str(meta.get("uid", "")),
        SERVICE_ACCOUNT: str((pod.get("spec") or {}).get("serviceAccountName") or ""),
        EPHEMERAL: "false" if vol.persistent else "true",
    }


async def volume_context(
    pod: Pod,
    vol: CSIVolume,
    driver: csidriver.CSIDriverSpec | None,
    tokens: TokenManager | None,
) -> dict[str, str]:
    """The volume's attributes, with pod info and tokens when the CSIDriver asks."""
    attrs = dict(vol.attributes)
    if csidriver.pod_info_on_mount(driver):
        attrs.update(pod_info(pod, vol))
    requests = csidriver.token_requests(driver)
    if requests:
        attrs[TOKENS] = await _tokens(pod, requests, tokens)
    return attrs


# What TokenManager.get_service_account_token raises: its own RuntimeError
# (no API server, no token in the answer) or the API call's failure.
_TOKEN_ERRORS: tuple[type[Exception], ...] = (RuntimeError, *API_ERRORS)


async def _tokens(pod: Pod, requests: list[dict[str, Any]], tokens: TokenManager | None) -> str:
    if tokens is None:
        raise VolumeError("service account tokens for the CSI driver need an API server")
    meta = pod["metadata"]
    sa = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    out: dict[str, dict[str, str]] = {}
    for r in requests:
        audience = str(r.get("audience") or "")
        exp = r.get("expirationSeconds")
        spec = TokenRequestSpec(
            audiences=(audience,) if audience else (),
            expiration_seconds=int(exp) if exp is not None else None,
            bound_object_ref=BoundObjectRef(str(meta["name"]), str(meta["uid"])),
        )
        try:
            tok = await tokens.get_service_account_token(str(meta.get("namespace")), sa, spec)
        except _TOKEN_ERRORS as err:
            raise VolumeError(f"failed to get service account token attributes: {err}") from err
        expires = datetime.datetime.fromtimestamp(tok.expiration, datetime.UTC)
        out[audience] = {
            "token": tok.token,
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    return json.dumps(out, sort_keys=True)


async def secrets(api: APIClient | None, ref: SecretRef | None, what: str) -> dict[str, str]:
    """The secret's data, decoded (getCredentialsFromSecret)."""
    if ref is None:
        return {}
    ns, name = ref
    if api is None:
        raise VolumeError(f"fetching {what} {ns}/{name} failed: no API server")
    try:
        secret = await api.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
    except APIError as err:
        raise VolumeError(
            f"fetching {what} {ns}/{name} failed: failed to find the secret {name} in the "
            f"namespace {ns} with error: {err.message}"
        ) from err
    out = {}
    for k, v in (secret.get("data") or {}).items():
        try:
            out[str(k)] = base64.b64decode(v).decode("utf-8", errors="surrogateescape")
        except ValueError as err:
            raise VolumeError(f"{what} {ns}/{name}: key {k!r} is not base64") from err
    return out


def applies_fs_group(vol: CSIVolume, fs_group: int | None, policy: str) -> bool:
    """supportsFSGroup upstream: whether the kubelet changes ownership itself."""
    if fs_group is None or policy == csidriver.NONE or vol.read_only:
        return False
    if policy == csidriver.FILE:
        return True
    if not vol.fs_type:
        return False
    if vol.persistent:
        return any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in vol.access_modes)
    return True


def fs_group_of(pod: Pod) -> int | None:
    g = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(g) if g is not None else None
