"""The kubelet-managed /etc/hosts: upstream's content tables and mount rules."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.hosts import (
    make_hosts_mount,
    managed_hosts_file_content,
    node_hosts_file_content,
    write_file_atomically,
)
from kubelet.container.runtime import Mount

LOCAL = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
ALIAS1 = [{"ip": "123.45.67.89", "hostnames": ["foo", "bar", "baz"]}]
ALIAS2 = [*ALIAS1, {"ip": "456.78.90.123", "hostnames": ["park", "doo", "boo"]}]
ALIAS_LINES = "\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"
ALIAS_LINES2 = ALIAS_LINES + "456.78.90.123\tpark\tdoo\tboo\n"
HEADER = "# Kubernetes-managed hosts file.\n"


@pytest.mark.parametrize(
    ("ips", "domain", "aliases", "want"),
    [
        (["123.45.67.89"], "", [], HEADER + LOCAL + "123.45.67.89\tpodFoo\n"),
        (["203.0.113.1"], "domainFoo", [], HEADER + LOCAL + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\n"),
        (["203.0.113.1"], "domainFoo", ALIAS1,
         HEADER + LOCAL + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\n" + ALIAS_LINES),
        (["203.0.113.1"], "domainFoo", ALIAS2,
         HEADER + LOCAL + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\n" + ALIAS_LINES2),
        (["203.0.113.1", "fd00::6"], "domainFoo", [],
         HEADER + LOCAL + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\nfd00::6\tpodFoo.domainFoo\tpodFoo\n"),
    ],
)  # fmt: skip
def test_managed_hosts_file_content(
    ips: list[str], domain: str, aliases: list[dict[str, Any]], want: str
) -> None:
    assert managed_hosts_file_content(ips, "podFoo", domain, aliases).decode() == want


NODE_HOSTS = "# hosts file for testing.\n" + LOCAL + "123.45.67.89\tsome.domain\n"


@pytest.mark.parametrize(
    ("aliases", "tail"), [([], ""), (ALIAS1, ALIAS_LINES), (ALIAS2, ALIAS_LINES2)]
)
def test_node_hosts_file_content(tmp_path: Path, aliases: list[dict[str, Any]], tail: str) -> None:
    node = tmp_path / "hosts"
    node.write_text(NODE_HOSTS)
    got = node_hosts_file_content(aliases, str(node)).decode()
    assert got == "# Kubernetes-managed hosts file (host network).\n" + NODE_HOSTS + tail


def _pod(host_network: bool = False, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"hostNetwork": host_network, "hostAliases": ALIAS1, **spec},
    }


def test_pod_network_mount(tmp_path: Path) -> None:
    m = make_hosts_mount(_pod(), {"name": "c"}, str(tmp_path), ["10.1.0.5"], "p", "sub.ns.svc.x")
    path = tmp_path / "etc-hosts"
    assert m == Mount(container_path="/etc/hosts", host_path=str(path), selinux_relabel=True)
    assert path.read_text() == HEADER + LOCAL + "10.1.0.5\tp.sub.ns.svc.x\tp\n" + ALIAS_LINES
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_host_network_mount_uses_node_file(tmp_path: Path) -> None:
    node = tmp_path / "node-hosts"
    node.write_text(NODE_HOSTS)
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    # No pod IPs yet is fine on the host network.
    m = make_hosts_mount(_pod(True), {"name": "c"}, str(pod_dir), [], "p", "", str(node))
    assert m is not None
    assert Path(m.host_path).read_text() == (
        "# Kubernetes-managed hosts file (host network).\n" + NODE_HOSTS + ALIAS_LINES
    )


def test_not_mounted(tmp_path: Path) -> None:
    # Pod network without an IP yet: nothing written.
    assert make_hosts_mount(_pod(), {"name": "c"}, str(tmp_path), [], "p", "") is None
    assert not (tmp_path / "etc-hosts").exists()
    own = {"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/etc/hosts"}]}
    assert make_hosts_mount(_pod(), own, str(tmp_path), ["10.1.0.5"], "p", "") is None
    other = {"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/etc/hostsx"}]}
    assert make_hosts_mount(_pod(), other, str(tmp_path), ["10.1.0.5"], "p", "") is not None


def test_missing_node_hosts_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        make_hosts_mount(_pod(True), {"name": "c"}, str(tmp_path), [], "p", "", str(tmp_path / "x"))


def test_atomic_write_replaces_and_skips_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "f"
    old = os.umask(0o077)  # the mode is set explicitly, whatever the umask
    try:
        write_file_atomically(str(path), b"one\n", 0o644)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"one\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    ino = path.stat().st_ino
    write_file_atomically(str(path), b"one\n", 0o644)
    assert path.stat().st_ino == ino  # unchanged: not rewritten
    write_file_atomically(str(path), b"one\ntwo\n", 0o644)
    assert path.read_bytes() == b"one\ntwo\n"
    write_file_atomically(str(path), b"one\n", 0o644)  # a prefix of the old content
    assert path.read_bytes() == b"one\n"
    assert sorted(os.listdir(tmp_path)) == ["f"]  # no temp files left
