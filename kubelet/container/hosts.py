"""The kubelet-managed /etc/hosts of a pod (makeHostsMount, ensureHostsFile and
managedHostsFileContent in kubelet_pods.go upstream).

Every container of a pod bind-mounts `<root>/pods/<uid>/etc-hosts` at
/etc/hosts, unless it mounts a volume there itself or the pod is on the pod
network and has no IP yet. A pod-network pod gets localhost entries and its IPs
with its hostname (and FQDN with a subdomain); a host-network pod gets the
node's /etc/hosts. Both end with the pod's hostAliases.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kubelet.container.runtime import Mount
from kubelet.types import Container, HostAlias, Pod
from kubelet.util.atomicfile import write_atomic

ETC_HOSTS_PATH = "/etc/hosts"
ETC_HOSTS_FILE = "etc-hosts"
HOSTS_FILE_MODE = 0o644

_HEADER = b"# Kubernetes-managed hosts file.\n"
_HEADER_HOST_NETWORK = b"# Kubernetes-managed hosts file (host network).\n"
_LOCALHOST = (
    b"127.0.0.1\tlocalhost\n"
    b"::1\tlocalhost ip6-localhost ip6-loopback\n"
    b"fe00::0\tip6-localnet\n"
    b"fe00::0\tip6-mcastprefix\n"
    b"fe00::1\tip6-allnodes\n"
    b"fe00::2\tip6-allrouters\n"
)


def host_aliases_entries(host_aliases: Sequence[HostAlias]) -> bytes:
    """One line per alias IP with all its hostnames, after a blank line and a comment."""
    if not host_aliases:
        return b""
    lines = ["", "# Entries added by HostAliases."]
    lines += [
        "\t".join([str(a.get("ip") or ""), *(a.get("hostnames") or [])]) for a in host_aliases
    ]
    return ("\n".join(lines) + "\n").encode()


def managed_hosts_file_content(
    pod_ips: Sequence[str],
    hostname: str,
    domain: str,
    host_aliases: Sequence[HostAlias],
) -> bytes:
    """The hosts file of a pod on the pod network."""
    if domain:
        entries = "".join(f"{ip}\t{hostname}.{domain}\t{hostname}\n" for ip in pod_ips)
    else:
        entries = "".join(f"{ip}\t{hostname}\n" for ip in pod_ips)
    return _HEADER + _LOCALHOST + entries.encode() + host_aliases_entries(host_aliases)


def node_hosts_file_content(
    host_aliases: Sequence[HostAlias], node_hosts_path: str = ETC_HOSTS_PATH
) -> bytes:
    """The hosts file of a host-network pod: the node's, then the aliases."""
    with open(node_hosts_path, "rb") as f:
        node = f.read()
    return _HEADER_HOST_NETWORK + node + host_aliases_entries(host_aliases)


def write_file_atomically(path: str, content: bytes, mode: int) -> None:
    """Replace the file's content through a temp file and a rename, so a reader
    never sees it half-written; unchanged content is not rewritten."""
    try:
        with open(path, "rb") as f:
            if f.read(len(content) + 1) == content and os.fstat(f.fileno()).st_mode & 0o777 == mode:
                return
    except FileNotFoundError:
        pass
    # Not durable: rewritten at each container start whenever it differs, so
    # a file emptied by a power loss is repaired before any new container
    # mounts it.
    write_atomic(path, content, mode, durable=False)


def should_mount_hosts_file(pod: Pod, pod_ips: Sequence[str]) -> bool:
    """Mounted for host-network pods, and for others once they have an IP."""
    return bool(pod_ips) or bool((pod.get("spec") or {}).get("hostNetwork"))


def make_hosts_mount(
    pod: Pod,
    container: Container,
    pod_dir: str,
    pod_ips: Sequence[str],
    hostname: str,
    domain: str,
    node_hosts_path: str = ETC_HOSTS_PATH,
) -> Mount | None:
    """Write `<pod_dir>/etc-hosts` and return its mount for this container, or
    None when it is not mounted. pod_ips as the runtime reported them; hostname
    and domain from generate_pod_hostname_and_domain. OSError when the file
    cannot be written (or the node's hosts file read): the container cannot start."""
    if not should_mount_hosts_file(pod, pod_ips):
        return None
    if any(m.get("mountPath") == ETC_HOSTS_PATH for m in container.get("volumeMounts") or []):
        return None
    spec = pod.get("spec") or {}
    aliases = spec.get("hostAliases") or []
    if spec.get("hostNetwork"):
        content = node_hosts_file_content(aliases, node_hosts_path)
    else:
        content = managed_hosts_file_content(pod_ips, hostname, domain, aliases)
    path = os.path.join(pod_dir, ETC_HOSTS_FILE)
    write_file_atomically(path, content, HOSTS_FILE_MODE)
    return Mount(
        container_path=ETC_HOSTS_PATH, host_path=path, read_only=False, selinux_relabel=True
    )
