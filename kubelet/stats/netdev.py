"""Per-interface counters of a network namespace from /proc/<pid>/net/dev, as
cAdvisor reads them for a container's network (one read per pod per collection)."""

from __future__ import annotations

from dataclasses import dataclass

# Interfaces cAdvisor leaves out of a container's network figures: loopback and
# the host side of veth pairs or bridges that show up in the host namespace.
IGNORED_PREFIXES = ("lo", "veth", "docker", "nerdctl")


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_dropped: int


def parse_net_dev(data: str) -> list[Interface]:
    """The interfaces of a /proc/net/dev text, skipping the two header lines,
    ignored interfaces and malformed lines."""
    out = []
    for line in data.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name or name.startswith(IGNORED_PREFIXES):
            continue
        f = rest.split()
        if len(f) < 16 or not all(x.isdigit() for x in f[:16]):
            continue
        v = [int(x) for x in f[:16]]
        # receive: bytes packets errs drop fifo frame compressed multicast; transmit: the same 8
        out.append(Interface(name, v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11]))
    return out


def read_net_dev(path: str) -> list[Interface] | None:
    try:
        with open(path) as fh:
            return parse_net_dev(fh.read())
    except (OSError, ValueError):
        return None


def first_pid(procs_file: str) -> int | None:
    """Any process of a cgroup (the first in its cgroup.procs), or None when empty."""
    try:
        with open(procs_file) as fh:
            line = fh.readline().strip()
    except OSError:
        return None
    return int(line) if line.isdigit() else None
