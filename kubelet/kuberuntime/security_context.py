"""Pod and container security contexts as CRI messages, as the v1.34 kubelet
builds them (pkg/kubelet/kuberuntime security_context*.go, helpers.go,
kuberuntime_sandbox.go, util/util.go, pkg/securitycontext, pkg/security/apparmor).

Pure functions over the pod as a dict (after `apply_defaults`, so
`spec.securityContext` is a dict as the API server's defaulting makes it):

- `container_security_context(pod, c, seccomp_root=..., image_uid=..., image_username=...)`
  -> `LinuxContainerConfig.security_context` for CreateContainer;
- `sandbox_security_context(pod, seccomp_root=...)`
  -> `LinuxPodSandboxConfig.security_context` for RunPodSandbox
  (sysctls stay in `kubelet.sysctl.sandbox_sysctls`);
- `verify_run_as_non_root(pod, c, image_uid, image_username)` -> upstream's
  error message or None; the caller fails the start with CreateContainerConfigError
  and a `Failed` event "Error: <message>", as for a SecurityContextError.

What the caller supplies:

- the image user: `ImageStatus(ImageSpec(image=<the pulled image ref>))` and
  `image_user(resp.image if resp.HasField("image") else None)` -> `(uid, username)`
  (CRI `Image.uid` wins over `Image.username`; neither set means uid 0, root, as
  upstream's getImageUser). Pass both to `container_security_context` and
  `verify_run_as_non_root`; the image user fills run_as_user/run_as_username only
  when no runAsUser is set on the pod or the container.
- `seccomp_root`: `<root-dir>/seccomp`; `localhostProfile` refs are joined under it.
- `seccomp_default`: KubeletConfiguration `seccompDefault` (false: unset means Unconfined).
- `extra_groups`: upstream's GetExtraSupplementalGroupsForPod (the
  `pv.beta.kubernetes.io/gid` annotations of the pod's PVs); empty until volumes
  report them.
- `pid_target`: the target container id for an ephemeral container's pid namespace.

Errors upstream returns while building the config (a Localhost seccomp profile
without `localhostProfile`, an unknown supplementalGroupsPolicy, a Localhost
AppArmor profile without a name, hostUsers with the gate off) raise
`SecurityContextError` with upstream's text. `hostUsers: false` takes the pod's
mappings (`userns`, from kubelet/userns) into `userns_options` (mode POD);
without them it raises: the pod is never run in the host's user namespace
instead. `hostUsers: true` or unset with the gate on asks for the NODE user
namespace, as upstream.
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Iterable, Mapping
from typing import cast

from kubelet.cri.api import api_pb2 as pb
from kubelet.types import (
    AppArmorProfile,
    Capabilities,
    Container,
    Pod,
    PodSecurityContext,
    SeccompProfile,
    SecurityContext,
    SELinuxOptions,
    containers_of,
)

APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_RUNTIME_DEFAULT = "runtime/default"
APPARMOR_UNCONFINED = "unconfined"
APPARMOR_LOCALHOST_PREFIX = "localhost/"

# Kept in sync with moby's oci defaults by upstream; per-CPU thermal_throttle
# directories are appended by `default_masked_paths`.
_STATIC_MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)

_MAX_USER_ID = 2**31 - 1
_GROUPS_POLICY = {"Merge": pb.Merge, "Strict": pb.Strict}
_PT = pb.SecurityProfile.ProfileType


class SecurityContextError(ValueError):
    """Upstream fails the container (or sandbox) config with this message."""


# ------------------------------------------------------------------ paths
def possible_cpus(sysfs: str = "/sys") -> list[int]:
    """CPU numbers from `<sysfs>/devices/system/cpu/possible` ("0-3,8"); any
    unreadable or malformed list falls back to 0..n-1 of the usable CPUs."""
    try:
        with open(os.path.join(sysfs, "devices/system/cpu/possible")) as f:
            data = f.read().strip()
        cpus: list[int] = []
        for r in data.split(","):
            lo, sep, hi = r.partition("-")
            cpus.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        return cpus
    except (OSError, ValueError):
        return list(range(len(os.sched_getaffinity(0))))


@functools.cache
def default_masked_paths(sysfs: str = "/sys") -> tuple[str, ...]:
    """Upstream's Default procMount masked paths on this host, computed once:
    the static list, then each possible CPU's thermal_throttle that exists."""
    extra = []
    for cpu in possible_cpus(sysfs):
        rel = f"devices/system/cpu/cpu{cpu}/thermal_throttle"
        if os.path.exists(os.path.join(sysfs, rel)):
            extra.append("/sys/" + rel)
    return (*_STATIC_MASKED_PATHS, *extra)


def masked_paths(proc_mount: str | None) -> list[str]:
    # Only Unmasked clears the lists; privileged containers get the defaults too
    # and the runtime ignores them (containerd, CRI-O), as upstream relies on.
    return [] if proc_mount == "Unmasked" else list(default_masked_paths())


def readonly_paths(proc_mount: str | None) -> list[str]:
    return [] if proc_mount == "Unmasked" else list(DEFAULT_READONLY_PATHS)


# ------------------------------------------------------------ effective sc
_POD_INHERITED = ("seLinuxOptions", "runAsUser", "runAsGroup", "runAsNonRoot")


def _pod_sc(pod: Pod) -> PodSecurityContext:
    return pod["spec"].get("securityContext") or {}


def _set(d: Mapping[str, object], key: str) -> bool:
    return d.get(key) is not None


def effective_security_context(pod: Pod, container: Container) -> SecurityContext:
    """The container's securityContext over the fields it inherits from the
    pod's (DetermineEffectiveSecurityContext; windowsOptions has no meaning
    here); a field set on the container replaces the pod's whole value."""
    psc: Mapping[str, object] = _pod_sc(pod)
    csc: Mapping[str, object] = container.get("securityContext") or {}
    merged = {k: psc[k] for k in _POD_INHERITED if _set(psc, k)}
    merged.update({k: v for k, v in csc.items() if v is not None})
    # Every key is a SecurityContext field: the inherited ones exist in both.
    return cast(SecurityContext, merged)


def image_user(image: pb.Image | None) -> tuple[int | None, str]:
    """(uid, username) from an ImageStatus image: the uid when the runtime
    resolved one, else the name, else root."""
    if image is not None:
        if image.HasField("uid"):
            return image.uid.value, ""
        if image.username:
            return None, image.username
    return 0, ""


def _normalize_image_user(uid: int | None, username: str) -> tuple[int | None, str]:
    if uid is not None:
        return uid, ""
    return (None, username) if username else (0, "")


# -------------------------------------------------------------- namespaces
def namespace_options(
    pod: Pod,
    *,
    user_namespaces_support: bool = True,
    pid_target: str | None = None,
    userns: pb.UserNamespace | None = None,
) -> pb.NamespaceOption:
    """`userns`: the pod's mappings from the user namespace manager, which a
    `hostUsers: false` pod must have (kubelet/userns)."""
    spec = pod.get("spec") or {}
    if spec.get("hostPID"):
        pid = pb.NODE
    elif spec.get("shareProcessNamespace"):
        pid = pb.POD
    else:
        pid = pb.CONTAINER
    ns = pb.NamespaceOption(
        network=pb.NODE if spec.get("hostNetwork") else pb.POD,
        pid=pid,
        ipc=pb.NODE if spec.get("hostIPC") else pb.POD,
    )
    if pid_target is not None and pid == pb.CONTAINER:
        ns.pid, ns.target_id = pb.TARGET, pid_target
    host_users = spec.get("hostUsers")
    if host_users is not None and not user_namespaces_support:
        raise SecurityContextError(
            'the feature gate "UserNamespacesSupport" is disabled: can\'t set spec.HostUsers'
        )
    if host_users is False:
        # Never run such a pod in the host's user namespace instead.
        if userns is None or userns.mode != pb.POD or not userns.uids:
            raise SecurityContextError(
                "hostUsers: false: the pod has no user namespace mappings; it is not started"
            )
        ns.userns_options.CopyFrom(userns)
    elif user_namespaces_support:
        # With the gate on, host-user pods say NODE explicitly.
        ns.userns_options.mode = pb.NODE
    return ns


# ------------------------------------------------------- seccomp/apparmor
def _go_join(*elems: str) -> str:
    # filepath.Join: empty elements dropped, an absolute tail stays under the
    # root, the result cleaned ("//x" -> "/x", unlike posixpath.normpath).
    parts = [e for e in elems if e]
    if not parts:
        return ""
    p = posixpath.normpath("/".join(parts))
    return "/" + p.lstrip("/") if p.startswith("//") else p


def _seccomp_from_field(prof: SeccompProfile, seccomp_root: str) -> pb.SecurityProfile:
    kind = prof.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=_PT.RuntimeDefault)
    if kind == "Localhost":
        name = prof.get("localhostProfile")
        if not name:
            raise SecurityContextError(
                "localhostProfile must be set if seccompProfile type is Localhost."
            )
        return pb.SecurityProfile(
            profile_type=_PT.Localhost, localhost_ref=_go_join(seccomp_root, name)
        )
    return pb.SecurityProfile(profile_type=_PT.Unconfined)


def seccomp_profile(
    pod: Pod, container: Container, *, seccomp_root: str, seccomp_default: bool = False
) -> pb.SecurityProfile:
    """Container field, then pod field, then RuntimeDefault or Unconfined by
    seccompDefault. The removed seccomp annotations are not read."""
    for sc in (container.get("securityContext") or {}, _pod_sc(pod)):
        prof = sc.get("seccompProfile")
        if prof is not None:
            return _seccomp_from_field(prof, seccomp_root)
    return pb.SecurityProfile(
        profile_type=_PT.RuntimeDefault if seccomp_default else _PT.Unconfined
    )


def _apparmor_from_annotation(pod: Pod, container_name: str) -> AppArmorProfile | None:
    annotations = pod["metadata"].get("annotations") or {}
    val = annotations.get(APPARMOR_ANNOTATION_PREFIX + container_name)
    if val is None:
        return None
    if val == APPARMOR_RUNTIME_DEFAULT:
        return {"type": "RuntimeDefault"}
    if val == APPARMOR_UNCONFINED:
        return {"type": "Unconfined"}
    if val.startswith(APPARMOR_LOCALHOST_PREFIX):
        return {"type": "Localhost", "localhostProfile": val[len(APPARMOR_LOCALHOST_PREFIX) :]}
    return None  # an invalid annotation counts as absent


def apparmor_profile(pod: Pod, container: Container) -> tuple[pb.SecurityProfile | None, str]:
    """(profile, deprecated profile string): container field, then the legacy
    per-container annotation (static pods keep it unsynced), then pod field."""
    prof = (container.get("securityContext") or {}).get("appArmorProfile")
    if prof is None:
        prof = _apparmor_from_annotation(pod, container.get("name", ""))
    if prof is None:
        prof = _pod_sc(pod).get("appArmorProfile")
    if prof is None:
        return None, ""
    kind = prof.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=_PT.RuntimeDefault), APPARMOR_RUNTIME_DEFAULT
    if kind == "Unconfined":
        return pb.SecurityProfile(profile_type=_PT.Unconfined), APPARMOR_UNCONFINED
    if kind == "Localhost":
        name = prof.get("localhostProfile")
        if name is None:
            raise SecurityContextError("missing localhost apparmor profile name")
        return (
            pb.SecurityProfile(profile_type=_PT.Localhost, localhost_ref=name),
            APPARMOR_LOCALHOST_PREFIX + name,
        )
    raise SecurityContextError(f"unknown apparmor profile type: {_go_quote(str(kind))}")


# --------------------------------------------------------------- builders
def _selinux(opts: SELinuxOptions) -> pb.SELinuxOption:
    return pb.SELinuxOption(
        user=opts.get("user", ""),
        role=opts.get("role", ""),
        type=opts.get("type", ""),
        level=opts.get("level", ""),
    )


def _groups_policy(psc: PodSecurityContext) -> pb.SupplementalGroupsPolicy | None:
    policy = psc.get("supplementalGroupsPolicy")
    if policy is None:
        return None
    if policy not in _GROUPS_POLICY:
        raise SecurityContextError(f"unsupported supplementalGroupsPolicy: {policy}")
    return _GROUPS_POLICY[policy]


def _capabilities(caps: Capabilities) -> pb.Capability:
    # Names pass through verbatim ("NET_ADMIN"); the runtime adds "CAP_".
    return pb.Capability(
        add_capabilities=caps.get("add") or [], drop_capabilities=caps.get("drop") or []
    )


def _run_as_user(
    eff: SecurityContext, image_uid: int | None, image_username: str
) -> tuple[int | None, str]:
    """(uid, username): runAsUser, else the image's user (a name goes to the runtime)."""
    if _set(eff, "runAsUser"):
        return int(eff["runAsUser"]), ""
    return _normalize_image_user(image_uid, image_username)


def _supplemental_groups(
    psc: PodSecurityContext, extra_groups: Iterable[int]
) -> tuple[list[int], pb.SupplementalGroupsPolicy | None]:
    """(gids, policy). Order as upstream: fsGroup, the pod's groups, then the
    volumes' extra gids."""
    groups = [int(psc["fsGroup"])] if _set(psc, "fsGroup") else []
    groups.extend(int(g) for g in psc.get("supplementalGroups") or [])
    policy = _groups_policy(psc)
    groups.extend(extra_groups)
    return groups, policy


def container_security_context(
    pod: Pod,
    container: Container,
    *,
    seccomp_root: str,
    image_uid: int | None,
    image_username: str,
    seccomp_default: bool = False,
    extra_groups: Iterable[int] = (),
    user_namespaces_support: bool = True,
    pid_target: str | None = None,
    userns: pb.UserNamespace | None = None,
) -> pb.LinuxContainerSecurityContext:
    eff = effective_security_context(pod, container)
    out = pb.LinuxContainerSecurityContext(
        privileged=bool(eff.get("privileged")),
        readonly_rootfs=bool(eff.get("readOnlyRootFilesystem")),
        # Only an explicit false sets no_new_privs; unset leaves it to the runtime.
        no_new_privs=eff.get("allowPrivilegeEscalation") is False,
    )
    caps = eff.get("capabilities")
    if caps is not None:  # present even when empty
        out.capabilities.CopyFrom(_capabilities(caps))
    if _set(eff, "seLinuxOptions"):
        out.selinux_options.CopyFrom(_selinux(eff["seLinuxOptions"]))
    if _set(eff, "runAsGroup"):
        out.run_as_group.value = int(eff["runAsGroup"])

    out.seccomp.CopyFrom(
        seccomp_profile(pod, container, seccomp_root=seccomp_root, seccomp_default=seccomp_default)
    )
    aa, aa_name = apparmor_profile(pod, container)
    if aa is not None:
        out.apparmor.CopyFrom(aa)
        out.apparmor_profile = aa_name

    uid, out.run_as_username = _run_as_user(eff, image_uid, image_username)
    if uid is not None:
        out.run_as_user.value = uid
    out.namespace_options.CopyFrom(
        namespace_options(
            pod, user_namespaces_support=user_namespaces_support, pid_target=pid_target,
            userns=userns,
        )
    )  # fmt: skip
    groups, policy = _supplemental_groups(_pod_sc(pod), extra_groups)
    out.supplemental_groups.extend(groups)
    if policy is not None:
        out.supplemental_groups_policy = policy
    out.masked_paths.extend(masked_paths(eff.get("procMount")))
    out.readonly_paths.extend(readonly_paths(eff.get("procMount")))
    return out


def _all_containers(pod: Pod) -> Iterable[Container]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        yield from containers_of(pod["spec"], kind)


def sandbox_security_context(
    pod: Pod,
    *,
    seccomp_root: str,
    extra_groups: Iterable[int] = (),
    user_namespaces_support: bool = True,
    userns: pb.UserNamespace | None = None,
) -> pb.LinuxSandboxSecurityContext:
    """The pause container's context. `seccomp_root` is unused: upstream always
    runs the sandbox under RuntimeDefault so a pod profile cannot break it."""
    del seccomp_root
    out = pb.LinuxSandboxSecurityContext(
        privileged=any(
            (c.get("securityContext") or {}).get("privileged") for c in _all_containers(pod)
        ),
        seccomp=pb.SecurityProfile(profile_type=_PT.RuntimeDefault),
    )
    psc = _pod_sc(pod)
    if _set(psc, "runAsUser"):
        out.run_as_user.value = int(psc["runAsUser"])
    if _set(psc, "runAsGroup"):
        out.run_as_group.value = int(psc["runAsGroup"])
    out.namespace_options.CopyFrom(
        namespace_options(pod, user_namespaces_support=user_namespaces_support, userns=userns)
    )
    # Order as upstream's sandbox: fsGroup, the volumes' extra gids, the pod's groups.
    if _set(psc, "fsGroup"):
        out.supplemental_groups.append(int(psc["fsGroup"]))
    out.supplemental_groups.extend(extra_groups)
    out.supplemental_groups.extend(int(g) for g in psc.get("supplementalGroups") or [])
    policy = _groups_policy(psc)
    if policy is not None:
        out.supplemental_groups_policy = policy
    if _set(psc, "seLinuxOptions"):
        out.selinux_options.CopyFrom(_selinux(psc["seLinuxOptions"]))
    return out


# ------------------------------------------------------------ runAsNonRoot
def _go_quote(s: str) -> str:
    # %q for the ASCII names a pod has: quotes and backslashes escaped.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _format_pod(pod: Pod) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('name', '')}_{md.get('namespace', '')}({md.get('uid', '')})"


def verify_run_as_non_root(
    pod: Pod, container: Container, image_uid: int | None, image_username: str
) -> str | None:
    """Upstream's message when runAsNonRoot: true cannot hold, else None."""
    eff = effective_security_context(pod, container)
    if not eff.get("runAsNonRoot"):
        return None
    where = f"(pod: {_go_quote(_format_pod(pod))}, container: {container.get('name', '')})"
    if _set(eff, "runAsUser"):
        if int(eff["runAsUser"]) == 0:
            return f"container's runAsUser breaks non-root policy {where}"
        return None
    uid, username = _normalize_image_user(image_uid, image_username)
    if uid is None:
        return (
            f"container has runAsNonRoot and image has non-numeric user ({username}), "
            f"cannot verify user is non-root {where}"
        )
    if uid == 0:
        return f"container has runAsNonRoot and image will run as root {where}"
    if not 0 <= uid <= _MAX_USER_ID:
        return (
            f"container has runAsNonRoot and image has an invalid user id ({uid}). "
            f"(Must be 1-({_MAX_USER_ID})): must be between 0 and {_MAX_USER_ID}, "
            f"inclusive {where}"
        )
    return None
