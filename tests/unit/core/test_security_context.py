"""Pod and container security contexts -> CRI messages, against upstream v1.34."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.protobuf import json_format

from kubelet.cri.api import api_pb2 as pb
from kubelet.kuberuntime import security_context as sc

ROOT = "/var/lib/kubelet/seccomp"
IMAGE_UID = 1000

STATIC_MASKED = [
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
]
READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def pod(
    psc: dict[str, Any] | None = None,
    csc: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "image": "busybox"}
    if csc is not None:
        c["securityContext"] = csc
    return {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "u-1",
            "annotations": annotations or {},
        },
        "spec": {"containers": [c], "securityContext": psc or {}, **spec},
    }


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        elif v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def expected_container(**over: Any) -> pb.LinuxContainerSecurityContext:
    base = {
        "namespaceOptions": {
            "network": "POD",
            "pid": "CONTAINER",
            "ipc": "POD",
            "usernsOptions": {"mode": "NODE"},
        },
        "runAsUser": {"value": IMAGE_UID},
        "maskedPaths": list(sc.default_masked_paths()),
        "readonlyPaths": READONLY,
        "seccomp": {"profileType": "Unconfined"},
    }
    return json_format.ParseDict(merge(base, over), pb.LinuxContainerSecurityContext())


def build(p: dict[str, Any], **kw: Any) -> pb.LinuxContainerSecurityContext:
    args: dict[str, Any] = {"seccomp_root": ROOT, "image_uid": IMAGE_UID, "image_username": ""}
    args.update(kw)
    return sc.container_security_context(p, p["spec"]["containers"][0], **args)


MAPPING = {"hostId": 196608, "containerId": 0, "length": 65536}
USERNS = json_format.ParseDict(
    {"mode": "POD", "uids": [MAPPING], "gids": [MAPPING]}, pb.UserNamespace()
)

SEL_POD = {"user": "system_u", "role": "system_r", "type": "container_t", "level": "s0:c1,c2"}

CONTAINER_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("nothing set", pod(), {}, {}),
    (
        "pod only",
        pod(
            {
                "runAsUser": 2000,
                "runAsGroup": 3000,
                "runAsNonRoot": True,
                "seLinuxOptions": SEL_POD,
                "fsGroup": 4000,
                "supplementalGroups": [5, 6],
            }
        ),
        {},
        {
            "runAsUser": {"value": 2000},
            "runAsGroup": {"value": 3000},
            "selinuxOptions": SEL_POD,
            "supplementalGroups": [4000, 5, 6],
        },
    ),
    (
        "container only",
        pod(
            None,
            {
                "runAsUser": 7,
                "runAsGroup": 8,
                "privileged": False,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"add": ["NET_ADMIN", "SYS_TIME"], "drop": ["ALL"]},
            },
        ),
        {},
        {
            "runAsUser": {"value": 7},
            "runAsGroup": {"value": 8},
            "readonlyRootfs": True,
            "noNewPrivs": True,
            "capabilities": {
                "addCapabilities": ["NET_ADMIN", "SYS_TIME"],
                "dropCapabilities": ["ALL"],
            },
        },
    ),
    (
        "container overrides pod, seLinuxOptions replaced whole",
        pod(
            {"runAsUser": 1, "runAsGroup": 2, "seLinuxOptions": SEL_POD, "runAsNonRoot": True},
            {"runAsUser": 10, "seLinuxOptions": {"type": "spc_t"}},
        ),
        {},
        {
            "runAsUser": {"value": 10},
            "runAsGroup": {"value": 2},
            "selinuxOptions": {"type": "spc_t"},
        },
    ),
    (
        "container runAsGroup over pod's",
        pod({"runAsGroup": 2}, {"runAsGroup": 0}),
        {},
        {"runAsGroup": {"value": 0}},
    ),
    (
        "pod runAsGroup only: uid from image",
        pod({"runAsGroup": 9}),
        {},
        {"runAsGroup": {"value": 9}},
    ),
    (
        "image username only",
        pod(),
        {"image_uid": None, "image_username": "nobody"},
        {"runAsUser": None, "runAsUsername": "nobody"},
    ),
    (
        "image uid wins over username",
        pod(),
        {"image_uid": 33, "image_username": "www-data"},
        {"runAsUser": {"value": 33}},
    ),
    (
        "image without user runs as root",
        pod(),
        {"image_uid": None, "image_username": ""},
        {"runAsUser": {"value": 0}},
    ),
    (
        "runAsUser ignores the image user",
        pod({"runAsUser": 5}),
        {"image_uid": None, "image_username": "nobody"},
        {"runAsUser": {"value": 5}},
    ),
    ("empty capabilities still sent", pod(None, {"capabilities": {}}), {}, {"capabilities": {}}),
    (
        "capabilities only on the container",
        pod(None, {"capabilities": {"add": ["CHOWN"]}}),
        {},
        {"capabilities": {"addCapabilities": ["CHOWN"]}},
    ),
    ("allowPrivilegeEscalation true", pod(None, {"allowPrivilegeEscalation": True}), {}, {}),
    ("privileged", pod(None, {"privileged": True}), {}, {"privileged": True}),
    # procMount x privileged: only Unmasked clears the lists; upstream sends the
    # defaults for privileged containers and the runtime drops them.
    ("procMount Default", pod(None, {"procMount": "Default"}), {}, {}),
    (
        "procMount Unmasked",
        pod(None, {"procMount": "Unmasked"}),
        {},
        {"maskedPaths": [], "readonlyPaths": []},
    ),
    (
        "privileged, procMount unset",
        pod(None, {"privileged": True}),
        {},
        {"privileged": True},
    ),
    (
        "privileged, procMount Default",
        pod(None, {"privileged": True, "procMount": "Default"}),
        {},
        {"privileged": True},
    ),
    (
        "privileged, procMount Unmasked",
        pod(None, {"privileged": True, "procMount": "Unmasked"}),
        {},
        {"privileged": True, "maskedPaths": [], "readonlyPaths": []},
    ),
    # seccomp
    (
        "seccomp unset, seccompDefault on",
        pod(),
        {"seccomp_default": True},
        {"seccomp": {"profileType": "RuntimeDefault"}},
    ),
    (
        "seccomp pod RuntimeDefault",
        pod({"seccompProfile": {"type": "RuntimeDefault"}}),
        {},
        {"seccomp": {"profileType": "RuntimeDefault"}},
    ),
    (
        "seccomp pod Unconfined beats seccompDefault",
        pod({"seccompProfile": {"type": "Unconfined"}}),
        {"seccomp_default": True},
        {"seccomp": {"profileType": "Unconfined"}},
    ),
    (
        "seccomp pod Localhost",
        pod({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}),
        {},
        {"seccomp": {"profileType": "Localhost", "localhostRef": f"{ROOT}/profiles/audit.json"}},
    ),
    (
        "seccomp container Localhost over pod RuntimeDefault",
        pod(
            {"seccompProfile": {"type": "RuntimeDefault"}},
            {"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}},
        ),
        {},
        {"seccomp": {"profileType": "Localhost", "localhostRef": f"{ROOT}/a.json"}},
    ),
    (
        "seccomp container Unconfined over pod Localhost",
        pod(
            {"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}},
            {"seccompProfile": {"type": "Unconfined"}},
        ),
        {},
        {"seccomp": {"profileType": "Unconfined"}},
    ),
    (
        "seccomp Localhost ref joined and cleaned like filepath.Join",
        pod(None, {"seccompProfile": {"type": "Localhost", "localhostProfile": "/x/../y.json"}}),
        {},
        {"seccomp": {"profileType": "Localhost", "localhostRef": f"{ROOT}/y.json"}},
    ),
    (
        "seccomp annotations are not read",
        pod(annotations={"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}),
        {},
        {},
    ),
    # AppArmor: field, legacy annotation, precedence
    (
        "apparmor container RuntimeDefault",
        pod(None, {"appArmorProfile": {"type": "RuntimeDefault"}}),
        {},
        {"apparmor": {"profileType": "RuntimeDefault"}, "apparmorProfile": "runtime/default"},
    ),
    (
        "apparmor pod Localhost",
        pod({"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny"}}),
        {},
        {
            "apparmor": {"profileType": "Localhost", "localhostRef": "k8s-deny"},
            "apparmorProfile": "localhost/k8s-deny",
        },
    ),
    (
        "apparmor container Unconfined over pod Localhost",
        pod(
            {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny"}},
            {"appArmorProfile": {"type": "Unconfined"}},
        ),
        {},
        {"apparmor": {"profileType": "Unconfined"}, "apparmorProfile": "unconfined"},
    ),
    (
        "apparmor annotation runtime/default",
        pod(annotations={sc.APPARMOR_ANNOTATION_PREFIX + "app": "runtime/default"}),
        {},
        {"apparmor": {"profileType": "RuntimeDefault"}, "apparmorProfile": "runtime/default"},
    ),
    (
        "apparmor annotation unconfined",
        pod(annotations={sc.APPARMOR_ANNOTATION_PREFIX + "app": "unconfined"}),
        {},
        {"apparmor": {"profileType": "Unconfined"}, "apparmorProfile": "unconfined"},
    ),
    (
        "apparmor annotation localhost/ over pod field",
        pod(
            {"appArmorProfile": {"type": "RuntimeDefault"}},
            annotations={sc.APPARMOR_ANNOTATION_PREFIX + "app": "localhost/foo"},
        ),
        {},
        {
            "apparmor": {"profileType": "Localhost", "localhostRef": "foo"},
            "apparmorProfile": "localhost/foo",
        },
    ),
    (
        "apparmor container field over annotation",
        pod(
            None,
            {"appArmorProfile": {"type": "RuntimeDefault"}},
            annotations={sc.APPARMOR_ANNOTATION_PREFIX + "app": "localhost/foo"},
        ),
        {},
        {"apparmor": {"profileType": "RuntimeDefault"}, "apparmorProfile": "runtime/default"},
    ),
    (
        "apparmor invalid annotation falls back to the pod field",
        pod(
            {"appArmorProfile": {"type": "Unconfined"}},
            annotations={sc.APPARMOR_ANNOTATION_PREFIX + "app": "bogus"},
        ),
        {},
        {"apparmor": {"profileType": "Unconfined"}, "apparmorProfile": "unconfined"},
    ),
    (
        "apparmor annotation of another container ignored",
        pod(annotations={sc.APPARMOR_ANNOTATION_PREFIX + "other": "runtime/default"}),
        {},
        {},
    ),
    # supplemental groups
    (
        "supplementalGroupsPolicy Merge",
        pod({"supplementalGroups": [7], "supplementalGroupsPolicy": "Merge"}),
        {},
        {"supplementalGroups": [7], "supplementalGroupsPolicy": "Merge"},
    ),
    (
        "supplementalGroupsPolicy Strict",
        pod({"fsGroup": 3, "supplementalGroups": [7], "supplementalGroupsPolicy": "Strict"}),
        {},
        {"supplementalGroups": [3, 7], "supplementalGroupsPolicy": "Strict"},
    ),
    (
        "volume gids after the pod's groups",
        pod({"fsGroup": 3, "supplementalGroups": [7, 8]}),
        {"extra_groups": [100]},
        {"supplementalGroups": [3, 7, 8, 100]},
    ),
    # namespaces
    (
        "shareProcessNamespace",
        pod(shareProcessNamespace=True),
        {},
        {"namespaceOptions": {"pid": "POD"}},
    ),
    (
        "hostPID wins over shareProcessNamespace",
        pod(hostPID=True, shareProcessNamespace=True),
        {},
        {"namespaceOptions": {"pid": "NODE"}},
    ),
    ("hostIPC", pod(hostIPC=True), {}, {"namespaceOptions": {"ipc": "NODE"}}),
    ("hostNetwork", pod(hostNetwork=True), {}, {"namespaceOptions": {"network": "NODE"}}),
    (
        "ephemeral target pid namespace",
        pod(),
        {"pid_target": "abc"},
        {"namespaceOptions": {"pid": "TARGET", "targetId": "abc"}},
    ),
    (
        "pid target ignored when the pod shares its pid namespace",
        pod(shareProcessNamespace=True),
        {"pid_target": "abc"},
        {"namespaceOptions": {"pid": "POD"}},
    ),
    ("hostUsers true", pod(hostUsers=True), {}, {}),
    (
        "hostUsers false: the pod's mappings, mode POD; runAsUser/fsGroup stay container IDs",
        pod({"runAsUser": 1000, "fsGroup": 2000}, hostUsers=False),
        {"userns": USERNS},
        {
            "namespaceOptions": {
                "usernsOptions": {"mode": "POD", "uids": [MAPPING], "gids": [MAPPING]}
            },
            "runAsUser": {"value": 1000},
            "supplementalGroups": ["2000"],
        },
    ),
    (
        "hostUsers false as an ephemeral container targeting another's pid namespace",
        pod(hostUsers=False),
        {"userns": USERNS, "pid_target": "abc"},
        {
            "namespaceOptions": {
                "pid": "TARGET",
                "targetId": "abc",
                "usernsOptions": {"mode": "POD", "uids": [MAPPING], "gids": [MAPPING]},
            }
        },
    ),
    (
        "UserNamespacesSupport off: no userns option",
        pod(),
        {"user_namespaces_support": False},
        {"namespaceOptions": {"usernsOptions": None}},
    ),
]


@pytest.mark.parametrize(
    ("p", "kw", "over"), [c[1:] for c in CONTAINER_CASES], ids=[c[0] for c in CONTAINER_CASES]
)
def test_container_security_context(
    p: dict[str, Any], kw: dict[str, Any], over: dict[str, Any]
) -> None:
    assert build(p, **kw) == expected_container(**over)


def test_unset_fields_have_no_presence() -> None:
    got = build(pod())
    for f in ("capabilities", "selinux_options", "run_as_group", "apparmor"):
        assert not got.HasField(f), f
    assert got.apparmor_profile == "" and got.run_as_username == ""


@pytest.mark.parametrize(
    ("p", "kw", "message"),
    [
        (
            pod(None, {"seccompProfile": {"type": "Localhost"}}),
            {},
            "localhostProfile must be set if seccompProfile type is Localhost.",
        ),
        (
            pod({"seccompProfile": {"type": "Localhost", "localhostProfile": ""}}),
            {},
            "localhostProfile must be set if seccompProfile type is Localhost.",
        ),
        (
            pod(None, {"appArmorProfile": {"type": "Localhost"}}),
            {},
            "missing localhost apparmor profile name",
        ),
        (
            pod({"appArmorProfile": {"type": "Weird"}}),
            {},
            'unknown apparmor profile type: "Weird"',
        ),
        (
            pod({"supplementalGroupsPolicy": "Loose"}),
            {},
            "unsupported supplementalGroupsPolicy: Loose",
        ),
        (
            pod(hostUsers=True),
            {"user_namespaces_support": False},
            'the feature gate "UserNamespacesSupport" is disabled: can\'t set spec.HostUsers',
        ),
        (pod(hostUsers=False), {}, "hostUsers: false: the pod has no user namespace mappings"),
        (
            pod(hostUsers=False),
            {"userns": pb.UserNamespace(mode=pb.NODE)},
            "hostUsers: false: the pod has no user namespace mappings",
        ),
    ],
)
def test_container_config_errors(p: dict[str, Any], kw: dict[str, Any], message: str) -> None:
    with pytest.raises(sc.SecurityContextError) as e:
        build(p, **kw)
    assert message in str(e.value)


# ----------------------------------------------------------------- sandbox
def expected_sandbox(**over: Any) -> pb.LinuxSandboxSecurityContext:
    base = {
        "namespaceOptions": {
            "network": "POD",
            "pid": "CONTAINER",
            "ipc": "POD",
            "usernsOptions": {"mode": "NODE"},
        },
        "seccomp": {"profileType": "RuntimeDefault"},
    }
    return json_format.ParseDict(merge(base, over), pb.LinuxSandboxSecurityContext())


SANDBOX_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("nothing set", pod(), {}, {}),
    (
        "pod fields, groups order fsGroup/volume gids/pod groups",
        pod(
            {
                "runAsUser": 1,
                "runAsGroup": 2,
                "fsGroup": 3,
                "supplementalGroups": [4, 5],
                "supplementalGroupsPolicy": "Strict",
                "seLinuxOptions": SEL_POD,
                "runAsNonRoot": True,
            }
        ),
        {"extra_groups": [100]},
        {
            "runAsUser": {"value": 1},
            "runAsGroup": {"value": 2},
            "supplementalGroups": [3, 100, 4, 5],
            "supplementalGroupsPolicy": "Strict",
            "selinuxOptions": SEL_POD,
        },
    ),
    (
        "container-level fields stay off the sandbox",
        pod(
            None,
            {"runAsUser": 9, "seLinuxOptions": {"type": "spc_t"}, "readOnlyRootFilesystem": True},
        ),
        {},
        {},
    ),
    (
        "pod seccomp never reaches the sandbox",
        pod({"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}}),
        {},
        {},
    ),
    (
        "pod apparmor never reaches the sandbox",
        pod({"appArmorProfile": {"type": "RuntimeDefault"}}),
        {},
        {},
    ),
    ("privileged container", pod(None, {"privileged": True}), {}, {"privileged": True}),
    ("privileged false", pod(None, {"privileged": False}), {}, {}),
    (
        "shareProcessNamespace",
        pod(shareProcessNamespace=True),
        {},
        {"namespaceOptions": {"pid": "POD"}},
    ),
    ("hostPID", pod(hostPID=True), {}, {"namespaceOptions": {"pid": "NODE"}}),
    ("hostIPC", pod(hostIPC=True), {}, {"namespaceOptions": {"ipc": "NODE"}}),
    ("hostNetwork", pod(hostNetwork=True), {}, {"namespaceOptions": {"network": "NODE"}}),
    (
        "hostUsers false: the pod's mappings, mode POD",
        pod({"runAsUser": 1000}, hostUsers=False),
        {"userns": USERNS},
        {
            "namespaceOptions": {
                "usernsOptions": {"mode": "POD", "uids": [MAPPING], "gids": [MAPPING]}
            },
            "runAsUser": {"value": 1000},
        },
    ),
]


@pytest.mark.parametrize(
    ("p", "kw", "over"), [c[1:] for c in SANDBOX_CASES], ids=[c[0] for c in SANDBOX_CASES]
)
def test_sandbox_security_context(
    p: dict[str, Any], kw: dict[str, Any], over: dict[str, Any]
) -> None:
    assert sc.sandbox_security_context(p, seccomp_root=ROOT, **kw) == expected_sandbox(**over)


@pytest.mark.parametrize("kind", ["initContainers", "ephemeralContainers"])
def test_sandbox_privileged_from_any_container(kind: str) -> None:
    p = pod()
    p["spec"][kind] = [{"name": "x", "image": "i", "securityContext": {"privileged": True}}]
    assert sc.sandbox_security_context(p, seccomp_root=ROOT).privileged


def test_sandbox_unsupported_groups_policy() -> None:
    with pytest.raises(sc.SecurityContextError, match="unsupported supplementalGroupsPolicy: X"):
        sc.sandbox_security_context(pod({"supplementalGroupsPolicy": "X"}), seccomp_root=ROOT)


# ------------------------------------------------------------ runAsNonRoot
WHERE = '(pod: "web_default(u-1)", container: app)'
ROOT_IMAGE = f"container has runAsNonRoot and image will run as root {WHERE}"


@pytest.mark.parametrize(
    ("psc", "csc", "uid", "username", "want"),
    [
        ({}, None, 0, "", None),
        ({"runAsNonRoot": False}, None, 0, "", None),
        ({"runAsNonRoot": True}, None, 0, "", ROOT_IMAGE),
        ({"runAsNonRoot": True}, None, 1000, "", None),
        ({"runAsNonRoot": True}, None, None, "", ROOT_IMAGE),
        (
            {"runAsNonRoot": True},
            None,
            None,
            "nonroot",
            "container has runAsNonRoot and image has non-numeric user (nonroot), "
            f"cannot verify user is non-root {WHERE}",
        ),
        ({"runAsNonRoot": True}, None, 1000, "root", None),
        (
            {"runAsNonRoot": True},
            {"runAsUser": 0},
            1000,
            "",
            f"container's runAsUser breaks non-root policy {WHERE}",
        ),
        (
            {"runAsNonRoot": True, "runAsUser": 0},
            None,
            1000,
            "",
            f"container's runAsUser breaks non-root policy {WHERE}",
        ),
        ({"runAsNonRoot": True}, {"runAsUser": 1000}, 0, "", None),
        ({"runAsNonRoot": True, "runAsUser": 0}, {"runAsUser": 5}, 0, "", None),
        ({"runAsNonRoot": True, "runAsUser": 5}, None, None, "root", None),
        ({}, {"runAsNonRoot": True}, 0, "", ROOT_IMAGE),
        ({"runAsNonRoot": False}, {"runAsNonRoot": True}, 0, "", ROOT_IMAGE),
        ({"runAsNonRoot": True}, {"runAsNonRoot": False}, 0, "", None),
        (
            {"runAsNonRoot": True},
            None,
            -1,
            "",
            "container has runAsNonRoot and image has an invalid user id (-1). "
            "(Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive "
            f"{WHERE}",
        ),
        (
            {"runAsNonRoot": True},
            None,
            2**31,
            "",
            "container has runAsNonRoot and image has an invalid user id (2147483648). "
            "(Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive "
            f"{WHERE}",
        ),
    ],
)
def test_verify_run_as_non_root(
    psc: dict[str, Any],
    csc: dict[str, Any] | None,
    uid: int | None,
    username: str,
    want: str | None,
) -> None:
    p = pod(psc, csc)
    assert sc.verify_run_as_non_root(p, p["spec"]["containers"][0], uid, username) == want


# ------------------------------------------------------------- image, paths
def test_image_user() -> None:
    assert sc.image_user(None) == (0, "")
    assert sc.image_user(pb.Image()) == (0, "")
    assert sc.image_user(pb.Image(username="nobody")) == (None, "nobody")
    assert sc.image_user(pb.Image(uid=pb.Int64Value(value=0), username="x")) == (0, "")
    assert sc.image_user(pb.Image(uid=pb.Int64Value(value=65534))) == (65534, "")


def test_default_paths_lists() -> None:
    got = sc.default_masked_paths()
    assert list(got[: len(STATIC_MASKED)]) == STATIC_MASKED
    assert all(p.endswith("/thermal_throttle") for p in got[len(STATIC_MASKED) :])
    assert list(sc.DEFAULT_READONLY_PATHS) == READONLY
    assert sc.masked_paths("Unmasked") == [] and sc.readonly_paths("Unmasked") == []
    assert sc.masked_paths(None) == sc.masked_paths("Default") == list(got)


def test_thermal_throttle_per_possible_cpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cpu = tmp_path / "devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "possible").write_text("0-2,5\n")
    for n in (0, 2, 5, 7):  # cpu7 is not possible: not masked
        (cpu / f"cpu{n}/thermal_throttle").mkdir(parents=True)
    got = sc.default_masked_paths(str(tmp_path))
    assert list(got) == [
        *STATIC_MASKED,
        "/sys/devices/system/cpu/cpu0/thermal_throttle",
        "/sys/devices/system/cpu/cpu2/thermal_throttle",
        "/sys/devices/system/cpu/cpu5/thermal_throttle",
    ]


def test_possible_cpus_fallback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    n = len(os.sched_getaffinity(0))
    assert sc.possible_cpus(str(tmp_path)) == list(range(n))
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/possible").write_text("0-x\n")
    assert sc.possible_cpus(str(tmp_path)) == list(range(n))
    (tmp_path / "devices/system/cpu/possible").write_text("0,3-4\n")
    assert sc.possible_cpus(str(tmp_path)) == [0, 3, 4]
