"""Pod sysctls (pkg/kubelet/sysctl and component-helpers node/util/sysctl upstream).

A pod may set the safe sysctls of this kernel and those the node's
allowedUnsafeSysctls lists (exact names, or prefixes ending in `*`), as long
as the sysctl lives in a namespace the pod does not share with the host. Any
other pod is refused at admission with SysctlForbidden. The accepted sysctls
go to the sandbox (LinuxPodSandboxConfig.sysctls) with `.` as the separator.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from kubelet.lifecycle.predicate import Rejection
from kubelet.types import Pod

FORBIDDEN_REASON = "SysctlForbidden"

IPC_NAMESPACE, NET_NAMESPACE, UNKNOWN_NAMESPACE = "IPC", "Net", ""

# Safe in v1.34: namespaced and unable to affect other pods or the node; some
# only on kernels where they became namespaced.
SAFE_SYSCTLS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("kernel.shm_rmid_forced", ()),
    ("net.ipv4.ip_local_port_range", ()),
    ("net.ipv4.tcp_syncookies", ()),
    ("net.ipv4.ping_group_range", ()),
    ("net.ipv4.ip_unprivileged_port_start", ()),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
)

_NAME_NAMESPACE = {
    "kernel.sem": IPC_NAMESPACE,
    "kernel.shmall": IPC_NAMESPACE,
    "kernel.shmmax": IPC_NAMESPACE,
    "kernel.shmmni": IPC_NAMESPACE,
    "kernel.shm_rmid_forced": IPC_NAMESPACE,
    "kernel.shm": IPC_NAMESPACE,
    "kernel.msgmax": IPC_NAMESPACE,
    "kernel.msgmnb": IPC_NAMESPACE,
    "kernel.msgmni": IPC_NAMESPACE,
    "kernel.msg": IPC_NAMESPACE,
}
_PREFIX_NAMESPACE = {"net": NET_NAMESPACE, "fs.mqueue": IPC_NAMESPACE}

SYSCTL_MAX_LENGTH = 253
_SEGMENT_FMT = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_PATTERN_SEGMENT_FMT = "([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
SYSCTL_PATTERN_FMT = "(" + _SEGMENT_FMT + "[\\./])*" + _PATTERN_SEGMENT_FMT
_PATTERN_RE = re.compile(SYSCTL_PATTERN_FMT)

_SWAP_SEPARATORS = str.maketrans("./", "/.")


def normalize_name(name: str) -> str:
    """`net/ipv4/conf/eno2.100/rp_filter` -> `net.ipv4.conf.eno2/100.rp_filter`:
    a name whose first separator is `/` has `.` and `/` swapped."""
    m = re.search(r"[./]", name)
    if m is None or m.group() == ".":
        return name
    return name.translate(_SWAP_SEPARATORS)


def _namespace_of(name: str) -> str:
    ns = _NAME_NAMESPACE.get(name)
    if ns is not None:
        return ns
    for prefix, ns in _PREFIX_NAMESPACE.items():
        if name.startswith(prefix + "."):
            return ns
    return UNKNOWN_NAMESPACE


def get_namespace(sysctl: str) -> tuple[str, str, bool]:
    """(namespace, name or prefix, whether it is a `*` prefix pattern)."""
    name = normalize_name(sysctl)
    star = name.find("*")
    prefixed = star >= 0
    if prefixed:
        name = name[:star]
    return _namespace_of(name), name, prefixed


def is_valid_sysctl_pattern(pattern: str) -> bool:
    return len(pattern) <= SYSCTL_MAX_LENGTH and _PATTERN_RE.fullmatch(pattern) is not None


def _kernel_version(release: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release.strip())
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def safe_sysctl_allowlist(kernel_release: str | None = None) -> list[str]:
    """The safe sysctls on this kernel (the running one by default); an
    unreadable version keeps only those safe on every kernel."""
    version = _kernel_version(os.uname().release if kernel_release is None else kernel_release)
    return [
        name
        for name, since in SAFE_SYSCTLS
        if not since or (version is not None and version >= since)
    ]


class SysctlAllowlist:
    """Admission of pods by their sysctls (patternAllowlist)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        """ValueError with upstream's message for an invalid or non-namespaced pattern."""
        self._names: dict[str, str] = {}
        self._prefixes: dict[str, str] = {}
        for pattern in patterns:
            if not is_valid_sysctl_pattern(pattern):
                raise ValueError(
                    f"sysctl {json.dumps(pattern)} must have at most {SYSCTL_MAX_LENGTH} "
                    f"characters and match regex {SYSCTL_PATTERN_FMT}"
                )
            ns, name, prefixed = get_namespace(pattern)
            if ns == UNKNOWN_NAMESPACE:
                raise ValueError(f"the sysctls {json.dumps(name)} are not known to be namespaced")
            (self._prefixes if prefixed else self._names)[name] = ns

    @classmethod
    def for_node(
        cls, allowed_unsafe_sysctls: Iterable[str], kernel_release: str | None = None
    ) -> SysctlAllowlist:
        """The safe sysctls of this kernel plus allowedUnsafeSysctls (KubeletConfiguration)."""
        return cls([*safe_sysctl_allowlist(kernel_release), *allowed_unsafe_sysctls])

    def _check(self, sysctl: str, host_net: bool, host_ipc: bool) -> str | None:
        """Why the sysctl is refused, or None."""
        name = normalize_name(sysctl)
        ns = self._names.get(name)
        if ns is None:
            ns = next((v for p, v in self._prefixes.items() if name.startswith(p)), None)
        if ns is None:
            return f"{json.dumps(name)} not allowlisted"
        if (ns == IPC_NAMESPACE and host_ipc) or (ns == NET_NAMESPACE and host_net):
            return f"{json.dumps(name)} not allowed with host {ns} enabled"
        return None

    def admit(self, pod: Pod) -> Rejection | None:
        """None when every sysctl of the pod is allowed, else the rejection."""
        spec = pod.get("spec") or {}
        sysctls = (spec.get("securityContext") or {}).get("sysctls") or []
        for s in sysctls:
            why = self._check(
                str(s.get("name") or ""), bool(spec.get("hostNetwork")), bool(spec.get("hostIPC"))
            )
            if why is not None:
                return Rejection(FORBIDDEN_REASON, f"forbidden sysctl: {why}")
        return None


def sandbox_sysctls(pod: Pod) -> dict[str, str]:
    """LinuxPodSandboxConfig.sysctls: names with `.` separators (runc needs them
    to tell a sysctl's namespace), a later duplicate winning."""
    sysctls = ((pod.get("spec") or {}).get("securityContext") or {}).get("sysctls") or []
    return {normalize_name(str(s.get("name") or "")): str(s.get("value") or "") for s in sysctls}
