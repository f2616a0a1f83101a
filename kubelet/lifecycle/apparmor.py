"""AppArmor admission (pkg/security/apparmor's validator and lifecycle's
appArmorAdmitHandler): a pending pod that asks for an AppArmor profile other
than unconfined is refused, reason "AppArmor", when the host's kernel has
AppArmor off, rather than left to fail in the runtime at every container start.
"""

from __future__ import annotations

from pathlib import Path

from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Pod, all_containers

REASON = "AppArmor"
ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
UNCONFINED = "unconfined"


def host_error(sysfs: Path = Path("/sys")) -> str | None:
    """Why this host cannot enforce AppArmor, or None (the kernel module is loaded
    and enabled: libcontainer's IsEnabled)."""
    if not (sysfs / "kernel/security/apparmor").exists():
        return "AppArmor is not enabled on the host"
    try:
        enabled = (sysfs / "module/apparmor/parameters/enabled").read_bytes()
    except OSError:
        enabled = b""
    if len(enabled) > 1 and enabled[:1] == b"Y":
        return None
    return "AppArmor is not enabled on the host"


def _confined(profile: object) -> bool:
    return isinstance(profile, dict) and profile.get("type") != "Unconfined"


def is_required(pod: Pod) -> bool:
    """Does the pod ask for a profile other than unconfined, in the pod's or a
    container's field or in a legacy per-container annotation?"""
    if _confined((pod["spec"].get("securityContext") or {}).get("appArmorProfile")):
        return True
    for c in all_containers(pod):
        if _confined((c.get("securityContext") or {}).get("appArmorProfile")):
            return True
    annotations = pod["metadata"].get("annotations") or {}
    return any(k.startswith(ANNOTATION_PREFIX) and v != UNCONFINED for k, v in annotations.items())


class Validator:
    """Checks pods against what the host could tell at start-up."""

    def __init__(self, host_err: str | None) -> None:
        self.host_err = host_err

    def validate(self, pod: Pod) -> str | None:
        if not is_required(pod):
            return None
        if self.host_err is not None:
            return self.host_err
        for c in all_containers(pod):
            prof = (c.get("securityContext") or {}).get("appArmorProfile")
            if prof is None or prof.get("type") != "Localhost":
                continue
            if not (prof.get("localhostProfile") or "").strip():
                return f"invalid empty AppArmor profile name: {prof}"
        return None

    def admit(self, pod: Pod) -> Rejection | None:
        """Only a pending pod is checked: one already running stays."""
        if (pod.get("status") or {}).get("phase") != "Pending":
            return None
        err = self.validate(pod)
        if err is None:
            return None
        return Rejection(REASON, f"Cannot enforce AppArmor: {err}")
