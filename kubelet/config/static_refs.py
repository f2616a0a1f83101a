"""Static pods may not reference API objects (PreventStaticPodAPIReferences,
beta and on in v1.34; HasAPIObjectReference in pkg/api/pod upstream).

A static pod runs before, and without, anything the API server would let its
mirror pod read: a manifest naming a service account, a secret, a config map,
a claim or a CSI driver is refused when it is decoded, with upstream's
message, and the file's other problems are reported the same way. With the
gate off only what upstream refused before it (resource claims, cluster trust
bundles) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Volume sources that need no API object (beyond the secret references some
# of them carry, which the secret pass finds first).
_LOCAL_SOURCES = frozenset({
    "awsElasticBlockStore", "azureDisk", "cephfs", "cinder", "downwardAPI", "emptyDir",
    "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "hostPath", "image",
    "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO",
    "storageos", "vsphereVolume",
})  # fmt: skip
# Sources whose reference needs the API, with the resource upstream names.
_API_SOURCES = {
    "configMap": "configmaps (via configmap volumes)",
    "secret": "secrets (via secret volumes)",
    "csi": "csidrivers (via CSI volumes)",
    "glusterfs": "endpoints (via glusterFS volumes)",
    "persistentVolumeClaim": "persistentvolumeclaims",
    "ephemeral": "persistentvolumeclaims (via ephemeral volumes)",
    "azureFile": "secrets (via azureFile volumes)",
}
_PROJECTED_SOURCES = {
    "configMap": "configmaps (via projected volumes)",
    "secret": "secrets (via projected volumes)",
    "serviceAccountToken": "serviceaccounts (via projected volumes)",
    "clusterTrustBundle": "clustertrustbundles",
    "podCertificate": "podcertificates",
}
# Where a volume source names a secret: (source, field, key of the name).
_VOLUME_SECRETS = (
    ("azureFile", "secretName", None), ("cephfs", "secretRef", "name"),
    ("cinder", "secretRef", "name"), ("flexVolume", "secretRef", "name"),
    ("rbd", "secretRef", "name"), ("secret", "secretName", None),
    ("scaleIO", "secretRef", "name"), ("iscsi", "secretRef", "name"),
    ("storageos", "secretRef", "name"), ("csi", "nodePublishSecretRef", "name"),
)  # fmt: skip


class StaticPodReferenceError(ValueError):
    """The manifest names an API object (or a volume this check cannot judge)."""


def _objects(v: object) -> list[Mapping[str, Any]]:
    return [x for x in v if isinstance(x, Mapping)] if isinstance(v, list) else []


def _get(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = d.get(key)
    return v if isinstance(v, Mapping) else {}


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from _objects(spec.get(field))


def _env_names(spec: Mapping[str, Any], from_key: str, ref_key: str) -> Iterator[object]:
    """envFrom[].<from_key>.name and env[].valueFrom.<ref_key>.name of every container."""
    for c in _containers(spec):
        for e in _objects(c.get("envFrom")):
            yield _get(e, from_key).get("name")
        for e in _objects(c.get("env")):
            yield _get(_get(e, "valueFrom"), ref_key).get("name")


def _secret_names(spec: Mapping[str, Any]) -> Iterator[object]:
    for ref in _objects(spec.get("imagePullSecrets")):
        yield ref.get("name")
    yield from _env_names(spec, "secretRef", "secretKeyRef")
    for v in _objects(spec.get("volumes")):
        for source, field, key in _VOLUME_SECRETS:
            src = _get(v, source)
            yield src.get(field) if key is None else _get(src, field).get(key)
        for s in _objects(_get(v, "projected").get("sources")):
            yield _get(s, "secret").get("name")


def _configmap_names(spec: Mapping[str, Any]) -> Iterator[object]:
    yield from _env_names(spec, "configMapRef", "configMapKeyRef")
    for v in _objects(spec.get("volumes")):
        yield _get(v, "configMap").get("name")
        for s in _objects(_get(v, "projected").get("sources")):
            yield _get(s, "configMap").get("name")


def _volume_reference(v: Mapping[str, Any]) -> str | None:
    source = next((k for k in v if k != "name" and v[k] is not None), None)
    if source in _LOCAL_SOURCES:
        return None
    if source in _API_SOURCES:
        return _API_SOURCES[str(source)]
    if source != "projected":
        raise StaticPodReferenceError(f"unknown volume type for volume  {v.get('name')!r}")
    for s in _objects(_get(v, "projected").get("sources")):
        kind = next((k for k in s if s[k] is not None), None)
        if kind in _PROJECTED_SOURCES:
            return _PROJECTED_SOURCES[str(kind)]
        if kind != "downwardAPI":
            raise StaticPodReferenceError(f"unknown source for projected volume {v.get('name')!r}")
    return None


def api_reference(spec: Mapping[str, Any]) -> str | None:
    """The kind of API object the pod spec names first, in upstream's order and
    words, or None. Raises StaticPodReferenceError for a volume it cannot judge."""
    if spec.get("serviceAccountName") or spec.get("serviceAccount"):
        return "serviceaccounts"
    if any(_secret_names(spec)):
        return "secrets"
    if any(_configmap_names(spec)):
        return "configmaps"
    if spec.get("resourceClaims"):
        return "resourceclaims"
    for v in _objects(spec.get("volumes")):
        found = _volume_reference(v)
        if found:
            return found
    return None


def check(spec: Mapping[str, Any], prevent_api_references: bool) -> None:
    """Raise StaticPodReferenceError with upstream's message for a manifest the
    kubelet must refuse."""
    if prevent_api_references:
        found = api_reference(spec)
        if found:
            raise StaticPodReferenceError(f"static pods may not reference {found}")
        return
    for v in _objects(spec.get("volumes")):
        if any("clusterTrustBundle" in s for s in _objects(_get(v, "projected").get("sources"))):
            raise StaticPodReferenceError(
                "static pods may not use ClusterTrustBundle projected volume sources"
            )
    if spec.get("resourceClaims"):
        raise StaticPodReferenceError("static pods may not use ResourceClaims")
