"""Pod fields this kubelet does not implement yet.

A pod written for the Go kubelet must never run as if one of its fields were
not there without a word: the pod syncer names every field listed here once
per pod, in a Warning event and a log line. The list shrinks as features land;
each entry is a field a user (or an admission plugin) wrote, never a default.
Volumes are not listed here: the volume manager names a volume type it cannot
set up in a FailedMount event, and the pod waits. Besides this list, every
field the pinned API does not declare is named (core_v1/known_fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubelet.core_v1.known_fields import api_source, unknown_fields
from kubelet.types import Pod
from kubelet.util.validation import is_extended_resource_name

# Pod-level fields, when set to anything but their zero value.
# hostnameOverride: alpha (HostnameOverride), not implemented.
_POD_FIELDS: tuple[str, ...] = ("hostnameOverride",)
# Prepared by the DRA manager (cm/dra) unless DynamicResourceAllocation is off.
_DRA_FIELD = "resourceClaims"
_POD_SECURITY = ("seLinuxChangePolicy",)
# restartPolicyRules: alpha (ContainerRestartRules), not implemented.
# (volumeDevices are: raw block claims as CRI devices, kubelet/container/mounts.)
_CONTAINER_FIELDS = ("restartPolicyRules",)
# env[].valueFrom sources the environment does not resolve: fileKeyRef is alpha
# (EnvFiles); without a word the variable would be set empty.
_ENV_SOURCES = ("fileKeyRef",)
# Container resources the kubelet turns into cgroup settings (hugepages-<size>
# too, as hugetlb limits: cm/hugepages); others (ephemeral-storage limits
# enforced by eviction) are not yet. Extended resources are not listed: the
# device manager allocates those of device plugins and names any other it
# does not check (cm/devicemanager).
_RESOURCES = ("cpu", "memory")
_HUGEPAGES = "hugepages-"


def unsupported_fields(pod: Pod, dra: bool = False) -> list[str]:
    """The fields to name; `dra`: the DRA manager prepares spec.resourceClaims."""
    # Read as the JSON it came as: these are the fields the typed Pod leaves out.
    spec: Mapping[str, Any] = pod["spec"]
    # Fields the pinned API does not declare at all: a newer API server's, or a
    # static manifest's typo (which upstream's decoder drops without a word).
    out = [f"{f} (not in {api_source()})" for f in unknown_fields(spec)]
    for f in _POD_FIELDS if dra else (*_POD_FIELDS, _DRA_FIELD):
        if spec.get(f):
            out.append(f"spec.{f}")
    # The scheduler's claim for extended resources backed by DRA
    # (DRAExtendedResource): its devices are not prepared by this kubelet.
    raw: Mapping[str, Any] = pod
    if (raw.get("status") or {}).get("extendedResourceClaimStatus"):
        out.append("status.extendedResourceClaimStatus")
    # Overhead is added to the pod cgroup; only the resources it has settings for.
    out += [
        f"spec.overhead[{r}]"
        for r in spec.get("overhead") or {}
        if r not in _RESOURCES and not r.startswith(_HUGEPAGES)
    ]
    # Pod-level resources (cpu, memory, hugepages) all set the pod cgroup
    # (kubelet/resourcehelper, cm/hugepages); the API server allows no others.
    psc = spec.get("securityContext") or {}
    out += [f"spec.securityContext.{f}" for f in _POD_SECURITY if psc.get(f)]
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(kind) or []:
            where = f"spec.{kind}[{c.get('name')}]"
            # Always makes an init container a sidecar; any other value, and any
            # on another container, is ContainerRestartRules (alpha).
            if c.get("restartPolicy") not in (None, "Always") or (
                kind != "initContainers" and c.get("restartPolicy") is not None
            ):
                out.append(f"{where}.restartPolicy")
            out += [
                f"{where}.env[{e.get('name')}].valueFrom.{f}"
                for e in c.get("env") or []
                for f in _ENV_SOURCES
                if (e.get("valueFrom") or {}).get(f) is not None
            ]
            if (c.get("lifecycle") or {}).get("stopSignal"):
                out.append(f"{where}.lifecycle.stopSignal")
            out += [f"{where}.{f}" for f in _CONTAINER_FIELDS if c.get(f)]
            res = c.get("resources") or {}
            for part in ("limits", "requests"):
                out += [
                    f"{where}.resources.{part}[{r}]"
                    for r in res.get(part) or {}
                    if r not in _RESOURCES
                    and not r.startswith(_HUGEPAGES)
                    and not is_extended_resource_name(r)
                ]
    return out
