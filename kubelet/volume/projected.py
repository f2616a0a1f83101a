"""projected volumes (pkg/volume/projected upstream): configMap, secret,
downwardAPI and serviceAccountToken sources merged into one directory by the
atomic writer. Every pod the API server admits has one (kube-api-access-*:
a token, the kube-root-ca.crt configMap and the namespace).

Tokens come from the TokenManager, bound to the pod; the file is rewritten
when the manager hands out a refreshed token (at 80 % of its lifetime), which
the periodic remount (requires_remount) picks up. clusterTrustBundle and
podCertificate sources are not supported: a clear FailedMount says so.
"""

from __future__ import annotations

from kubelet.objectcache import ObjectGetter
from kubelet.token import BoundObjectRef, TokenManager, TokenRequestSpec
from kubelet.types import Container, Pod, ServiceAccountTokenProjection
from kubelet.volume import VolumeError, VolumeSpec
from kubelet.volume import configmap as configmap_volume
from kubelet.volume import secret as secret_volume
from kubelet.volume.atomic_writer import FileProjection, VolumeWriter
from kubelet.volume.configmap import (
    default_mode,
    fs_group_of,
    get_object,
    remove_volume,
    write_volume,
)
from kubelet.volume.downwardapi import NodeAllocatable, aggregate, collect_data

PLUGIN_NAME = "kubernetes.io/projected"
DEFAULT_TOKEN_EXPIRATION = 3600  # the API's default for expirationSeconds


def _run_as_user(pod: Pod, container: Container) -> int | None:
    uid = (container.get("securityContext") or {}).get("runAsUser")
    if uid is None:
        uid = ((pod.get("spec") or {}).get("securityContext") or {}).get("runAsUser")
    return None if uid is None else int(uid)


def fs_user_of(pod: Pod) -> int | None:
    """The one runAsUser of all init and app containers, None when some
    container has none or they differ (FsUserFrom upstream): the token file
    then belongs to that user, mode 0600."""
    spec = pod.get("spec") or {}
    user: int | None = None
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        uid = _run_as_user(pod, c)
        if uid is None or (user is not None and uid != user):
            return None
        user = uid
    return user


class ProjectedPlugin:
    name = PLUGIN_NAME
    requires_remount = True
    read_only = True

    def __init__(
        self,
        configmaps: ObjectGetter,
        secrets: ObjectGetter,
        tokens: TokenManager | None,
        node_allocatable: NodeAllocatable = dict,
        writer: VolumeWriter | None = None,
    ) -> None:
        # tokens is None in standalone mode (no API client): projected
        # volumes then fail, as upstream's do without a kube client.
        self.configmaps = configmaps
        self.secrets = secrets
        self.tokens = tokens
        self.node_allocatable = node_allocatable
        self.writer = writer or VolumeWriter(memory_backed=True)

    def can_adopt(self, spec: VolumeSpec, dir: str, mounted_fstype: str | None) -> bool:
        # After a reboot the dir is there but its tmpfs (and so its files) is not.
        return mounted_fstype == "tmpfs"

    def can_support(self, spec: VolumeSpec) -> bool:
        return spec.get("projected") is not None

    async def set_up(self, pod: Pod, spec: VolumeSpec, dir: str) -> None:
        payload = await self.collect(pod, spec)
        await write_volume(self.writer, pod, spec, dir, payload)

    async def collect(self, pod: Pod, spec: VolumeSpec) -> dict[str, FileProjection]:
        """The merged payload of every source (collectData upstream)."""
        source = spec.get("projected") or {}
        name = spec.get("name", "")
        if self.tokens is None:
            raise VolumeError(
                f"cannot setup projected volume {name} because kube client is not configured"
            )
        mode = default_mode(source)
        md = pod.get("metadata") or {}
        namespace = md.get("namespace") or ""
        payload: dict[str, FileProjection] = {}
        errors: list[str] = []
        for src in source.get("sources") or []:
            try:
                if src.get("secret") is not None:
                    s = src["secret"]
                    optional = bool(s.get("optional"))
                    obj = await get_object(self.secrets, namespace, s.get("name") or "", optional)
                    payload.update(secret_volume.make_payload(s.get("items"), obj, mode, optional))
                elif src.get("configMap") is not None:
                    c = src["configMap"]
                    optional = bool(c.get("optional"))
                    obj = await get_object(
                        self.configmaps, namespace, c.get("name") or "", optional
                    )
                    payload.update(
                        configmap_volume.make_payload(c.get("items"), obj, mode, optional)
                    )
                elif src.get("downwardAPI") is not None:
                    files, errs = collect_data(
                        src["downwardAPI"].get("items"), pod, self.node_allocatable, mode
                    )
                    if errs:
                        errors.append(str(aggregate(errs)))
                        continue
                    payload.update(files)
                elif src.get("serviceAccountToken") is not None:
                    path, proj = await self._token(pod, src["serviceAccountToken"], mode)
                    payload[path] = proj
                elif src.get("clusterTrustBundle") is not None:
                    errors.append(
                        "clusterTrustBundle projected volume sources are not supported by this kubelet"
                    )
                elif src.get("podCertificate") is not None:
                    errors.append(
                        "podCertificate projected volume sources are not supported by this kubelet"
                    )
            except VolumeError as err:
                errors.append(str(err))
        if errors:
            raise aggregate(errors)
        return payload

    async def _token(
        self, pod: Pod, src: ServiceAccountTokenProjection, mode: int
    ) -> tuple[str, FileProjection]:
        assert self.tokens is not None
        md = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        fs_user = fs_user_of(pod)
        # Only its owner reads the token; with fsGroup the group gets read
        # access too (0640) when ownership is applied.
        if fs_user is not None or fs_group_of(pod) is not None:
            mode = 0o600
        audience = src.get("audience") or ""
        expiration = src.get("expirationSeconds")
        request = TokenRequestSpec(
            audiences=(audience,) if audience else (),
            expiration_seconds=int(expiration) if expiration else DEFAULT_TOKEN_EXPIRATION,
            bound_object_ref=BoundObjectRef(name=md.get("name") or "", uid=md.get("uid") or ""),
        )
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        try:
            token = await self.tokens.get_service_account_token(
                md.get("namespace") or "", account, request
            )
        except RuntimeError as err:  # the token manager's failure, fit for the event
            raise VolumeError(str(err)) from err
        return src.get("path") or "", FileProjection(token.token.encode(), mode, fs_user)

    async def tear_down(self, pod_uid: str, spec_name: str, dir: str) -> None:
        await remove_volume(self.writer, dir)
        if self.tokens is not None:
            self.tokens.delete_service_account_token(pod_uid)
