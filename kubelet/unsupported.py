"""Pod fields this kubelet does not implement yet.

A pod written for the Go kubelet must never run as if one of its fields were
not there without a word: the pod syncer names every field listed here once
per pod, in a Warning event and a log line. The list shrinks as features land;
each entry is a field a user (or an admission plugin) wrote, never a default.
"""

from __future__ import annotations

from typing import Any

Pod = dict[str, Any]

# Pod-level fields, when set to anything but their zero value.
_POD_FIELDS = (
    "activeDeadlineSeconds",
    "ephemeralContainers",
    "hostAliases",
    "shareProcessNamespace",
    "runtimeClassName",
    "readinessGates",
    "resourceClaims",
    "imagePullSecrets",
    "setHostnameAsFQDN",
    "subdomain",
)
_POD_SECURITY = (
    "sysctls",
    "fsGroup",
    "fsGroupChangePolicy",
    "runAsGroup",
    "runAsNonRoot",
    "supplementalGroups",
    "supplementalGroupsPolicy",
    "seccompProfile",
    "appArmorProfile",
    "seLinuxOptions",
    "seLinuxChangePolicy",
)
_CONTAINER_FIELDS = ("volumeMounts", "volumeDevices", "envFrom", "lifecycle", "resizePolicy")
_CONTAINER_SECURITY = (
    "capabilities",
    "runAsGroup",
    "runAsNonRoot",
    "seccompProfile",
    "appArmorProfile",
    "seLinuxOptions",
    "procMount",
)
_TERMINATION_LOG = "/dev/termination-log"


def _volume_type(v: dict[str, Any]) -> str:
    return next((k for k in v if k != "name"), "unknown")


def unsupported_fields(pod: Pod) -> list[str]:
    spec = pod.get("spec") or {}
    out: list[str] = []
    for f in _POD_FIELDS:
        if spec.get(f):
            out.append(f"spec.{f}")
    if spec.get("hostUsers") is False:
        out.append("spec.hostUsers")
    psc = spec.get("securityContext") or {}
    out += [f"spec.securityContext.{f}" for f in _POD_SECURITY if psc.get(f)]
    for v in spec.get("volumes") or []:
        out.append(f"spec.volumes[{v.get('name')}].{_volume_type(v)}")
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            where = f"spec.{kind}[{c.get('name')}]"
            if kind == "initContainers" and c.get("restartPolicy"):
                out.append(f"{where}.restartPolicy")
            out += [f"{where}.{f}" for f in _CONTAINER_FIELDS if c.get(f)]
            for e in c.get("env") or []:
                if "valueFrom" in e:
                    out.append(f"{where}.env[{e.get('name')}].valueFrom")
            csc = c.get("securityContext") or {}
            out += [f"{where}.securityContext.{f}" for f in _CONTAINER_SECURITY if csc.get(f)]
            if c.get("terminationMessagePath", _TERMINATION_LOG) != _TERMINATION_LOG or c.get(
                "terminationMessagePolicy", "File"
            ) not in ("File",):
                out.append(f"{where}.terminationMessagePath/Policy")
    return out
