"""Sysctl admission and sandbox conversion: upstream's cases."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.lifecycle.predicate import Rejection
from kubelet.sysctl import (
    SysctlAllowlist,
    get_namespace,
    normalize_name,
    safe_sysctl_allowlist,
    sandbox_sysctls,
)

ALL_SAFE = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
]


@pytest.mark.parametrize(
    ("release", "want"),
    [
        ("6.1.0-18-amd64", ALL_SAFE),
        ("4.15.0", ALL_SAFE),
        ("4.14.300", [s for s in ALL_SAFE if s not in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")]),
        ("4.5", [*ALL_SAFE[:7], *ALL_SAFE[8:10]]),
        ("3.16.0", ALL_SAFE[:6]),
        ("3.10.0-1160.el7", ALL_SAFE[:5]),
        ("garbage", ALL_SAFE[:5]),
    ],
)
def test_safe_sysctls_by_kernel(release: str, want: list[str]) -> None:
    assert safe_sysctl_allowlist(release) == want


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("kernel.shm_rmid_forced", "kernel.shm_rmid_forced"),
        ("kernel/shm_rmid_forced", "kernel.shm_rmid_forced"),
        ("net.ipv4.conf.eno2/100.rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),
        ("net/ipv4/conf/eno2.100/rp_filter", "net.ipv4.conf.eno2/100.rp_filter"),
        ("net/ipv4/ip_local_port_range", "net.ipv4.ip_local_port_range"),
        ("kernel/msgmax", "kernel.msgmax"),
        ("kernel/sem", "kernel.sem"),
        ("", ""),
        ("plain", "plain"),
    ],
)
def test_normalize_name(name: str, want: str) -> None:
    assert normalize_name(name) == want


@pytest.mark.parametrize(
    ("sysctl", "want"),
    [
        ("kernel.shm_rmid_forced", ("IPC", "kernel.shm_rmid_forced", False)),
        ("kernel.msg*", ("IPC", "kernel.msg", True)),
        ("kernel.msgmax", ("IPC", "kernel.msgmax", False)),
        ("kernel.shm*", ("IPC", "kernel.shm", True)),
        ("fs.mqueue.msg_max", ("IPC", "fs.mqueue.msg_max", False)),
        ("net.ipv4.tcp_rmem", ("Net", "net.ipv4.tcp_rmem", False)),
        ("net/ipv4/*", ("Net", "net.ipv4.", True)),
        ("net*", ("", "net", True)),  # "net" itself is not under "net."
        ("kernel.panic", ("", "kernel.panic", False)),
        ("vm.swappiness", ("", "vm.swappiness", False)),
    ],
)
def test_get_namespace(sysctl: str, want: tuple[str, str, bool]) -> None:
    assert get_namespace(sysctl) == want


@pytest.mark.parametrize(
    ("patterns", "error"),
    [
        (["kernel.msg*", "kernel.sem"], None),
        (["kernel/msg*", "kernel/sem"], None),
        (
            [" kernel.msg*"],
            'sysctl " kernel.msg*" must have at most 253 characters and match regex',
        ),
        (["kernel.msg* "], "must have at most"),
        (["net.-"], "must have at most"),
        (["net.*.foo"], "must have at most"),
        (["net.*/foo"], "must have at most"),
        (["foo"], 'the sysctls "foo" are not known to be namespaced'),
        (["foo*"], 'the sysctls "foo" are not known to be namespaced'),
        (["kernel.panic"], 'the sysctls "kernel.panic" are not known to be namespaced'),
        (["net." + "a" * 250], "must have at most"),
    ],
)
def test_new_allowlist(patterns: list[str], error: str | None) -> None:
    if error is None:
        SysctlAllowlist.for_node(patterns, "6.1.0")
    else:
        with pytest.raises(ValueError) as err:
            SysctlAllowlist.for_node(patterns, "6.1.0")
        assert error in str(err.value)


def _pod(sysctls: list[str], host_net: bool = False, host_ipc: bool = False) -> dict[str, Any]:
    return {
        "spec": {
            "hostNetwork": host_net,
            "hostIPC": host_ipc,
            "securityContext": {"sysctls": [{"name": s, "value": "1"} for s in sysctls]},
        }
    }


_W = SysctlAllowlist.for_node(["kernel.msg*", "kernel.sem", "net.b.*"], "6.1.0")


@pytest.mark.parametrize(
    "sysctl",
    [
        "kernel.shm_rmid_forced",
        "kernel/shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "kernel.msgmax",
        "kernel.sem",
        "kernel/sem",
        "net.b.c",
    ],
)
def test_allowed(sysctl: str) -> None:
    assert _W.admit(_pod([sysctl])) is None


@pytest.mark.parametrize(
    ("sysctl", "host_net", "host_ipc", "why"),
    [
        ("kernel.shm_rmid_forced", False, True, '"kernel.shm_rmid_forced" not allowed with host IPC enabled'),
        ("net.ipv4.ip_local_port_range", True, False, '"net.ipv4.ip_local_port_range" not allowed with host Net enabled'),
        ("foo", False, False, '"foo" not allowlisted'),
        ("net.a.b.c", False, False, '"net.a.b.c" not allowlisted'),
        ("net.ipv4.ip_local_port_range.a.b.c", False, False, '"net.ipv4.ip_local_port_range.a.b.c" not allowlisted'),
        ("kernel.msgmax", False, True, '"kernel.msgmax" not allowed with host IPC enabled'),
        ("kernel.sem", False, True, '"kernel.sem" not allowed with host IPC enabled'),
        ("net.b.c", True, False, '"net.b.c" not allowed with host Net enabled'),
        ("net/b/c", True, False, '"net.b.c" not allowed with host Net enabled'),
    ],
)  # fmt: skip
def test_rejected(sysctl: str, host_net: bool, host_ipc: bool, why: str) -> None:
    assert _W.admit(_pod([sysctl], host_net, host_ipc)) == Rejection(
        "SysctlForbidden", f"forbidden sysctl: {why}"
    )


def test_safe_only_by_default_and_first_bad_one_reported() -> None:
    w = SysctlAllowlist.for_node([], "6.1.0")
    assert w.admit({"spec": {}}) is None
    assert w.admit(_pod([])) is None
    # e2e "should not launch unsafe, but not explicitly enabled sysctls"
    got = w.admit(_pod(["kernel.shm_rmid_forced", "kernel.msgmax", "kernel.sem"]))
    assert got == Rejection("SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted')


def test_sandbox_sysctls() -> None:
    pod = _pod([])
    pod["spec"]["securityContext"]["sysctls"] = [
        {"name": "kernel/shm_rmid_forced", "value": "1"},
        {"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"},
        {"name": "net/ipv4/conf/eno2.100/rp_filter", "value": "0"},
    ]
    assert sandbox_sysctls(pod) == {
        "kernel.shm_rmid_forced": "1",
        "net.ipv4.ip_local_port_range": "1024 65535",
        "net.ipv4.conf.eno2/100.rp_filter": "0",
    }
    assert sandbox_sysctls({"spec": {}}) == {}
