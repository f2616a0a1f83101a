"""The machine's NUMA nodes, cores, caches and memory from sysfs, as cadvisor's
MachineInfo.Topology (github.com/google/cadvisor/utils/sysinfo) gives them to
the Go kubelet's resource managers.

`root` is the sysfs mount ("/sys"); tests point it at fixture trees.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

_NODE_DIR = re.compile(r"node/node(\d*)$")
_CPU_DIR = re.compile(r"/cpu(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s*([0-9]+) kB")
_CACHE_LEVEL_2 = 2


class SysinfoError(Exception):
    """sysfs says something the managers cannot work with."""


@dataclass(frozen=True)
class Cache:
    id: int
    size: int
    level: int
    type: str


@dataclass
class Core:
    id: int  # core_id: unique only within its socket
    socket_id: int
    threads: list[int] = field(default_factory=list)
    uncore_caches: list[Cache] = field(default_factory=list)


@dataclass(frozen=True)
class HugePages:
    page_size_kb: int
    num_pages: int


@dataclass
class Node:
    id: int
    cores: list[Core] = field(default_factory=list)
    memory: int = 0  # bytes
    hugepages: list[HugePages] = field(default_factory=list)
    distances: list[int] | None = None


@dataclass
class MachineTopology:
    nodes: list[Node]
    num_cores: int  # logical CPUs (cadvisor's NumCores)
    num_sockets: int


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def _int(path: str) -> int:
    text = _read(path)
    try:
        return int(text, 10)
    except ValueError:
        raise SysinfoError(f"{path}: not an integer: {text!r}") from None


def _online_cpus(root: str) -> set[int] | None:
    """/sys/devices/system/cpu/online; None when hotplug is off (all online)."""
    path = f"{root}/devices/system/cpu/online"
    if not os.path.exists(path):
        return None
    out: set[int] = set()
    for part in _read(path).split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _cores(root: str, cpu_dirs: list[str], online: set[int] | None) -> list[Core]:
    """getCoresInfo: threads grouped by (core_id, physical_package_id)."""
    cores: list[Core] = []
    for cpu_dir in cpu_dirs:
        m = _CPU_DIR.search(cpu_dir)
        if not m:
            raise SysinfoError(f"unexpected format of CPU directory: {cpu_dir}")
        cpu = int(m.group(1))
        if online is not None and cpu not in online:
            continue
        topo = f"{root}/devices/system/cpu/cpu{cpu}/topology"
        try:
            core_id = _int(f"{topo}/core_id")
            socket = _int(f"{topo}/physical_package_id")
        except FileNotFoundError:
            log.warning("No core_id/physical_package_id for cpu%d, skipped", cpu)
            continue
        found = next((c for c in cores if c.id == core_id and c.socket_id == socket), None)
        if found is None:
            found = Core(core_id, socket)
            cores.append(found)
        found.threads.append(cpu)
    return cores


def _cpu_count(shared_cpu_map: str) -> int:
    return sum(int(word, 16).bit_count() for word in shared_cpu_map.split(","))


def _caches(root: str, cpu: int) -> list[tuple[Cache, int]]:
    """The caches a CPU reaches, each with the number of CPUs sharing it."""
    out = []
    base = f"{root}/devices/system/cpu/cpu{cpu}/cache"
    for d in sorted(glob.glob(f"{base}/index*")):
        size_text = _read(f"{d}/size")
        size = int(size_text.rstrip("K")) * 1024
        cache = Cache(_int(f"{d}/id"), size, _int(f"{d}/level"), _read(f"{d}/type"))
        out.append((cache, _cpu_count(_read(f"{d}/shared_cpu_map"))))
    return out


def _add_uncore_caches(root: str, node: Node) -> None:
    """addCacheInfo, the part the CPU manager uses: a level-3+ cache shared by
    fewer CPUs than the node has is that core's uncore cache."""
    for core in node.cores:
        per_node = len(node.cores) * len(core.threads)
        for cache, cpus in _caches(root, core.threads[0]):
            if cache.level > _CACHE_LEVEL_2 and cpus != per_node:
                if cache not in core.uncore_caches:
                    core.uncore_caches.append(cache)


def _hugepages(directory: str) -> list[HugePages]:
    out = []
    for d in sorted(glob.glob(f"{directory}/hugepages-*")):
        size = int(os.path.basename(d).split("-")[1].removesuffix("kB"))
        out.append(HugePages(size, _int(f"{d}/nr_hugepages")))
    return out


def _node(root: str, node_dir: str, online: set[int] | None) -> Node:
    m = _NODE_DIR.search(node_dir)
    if not m or not m.group(1):
        raise SysinfoError(f"unexpected format of NUMA node directory: {node_dir}")
    node = Node(int(m.group(1)))
    node.cores = _cores(root, sorted(glob.glob(f"{node_dir}/cpu*[0-9]")), online)
    try:
        _add_uncore_caches(root, node)
    except (OSError, ValueError, SysinfoError) as err:  # no cache info (some VMs, arm64)
        log.info("No cache information for %s: %s", node_dir, err)
    try:
        meminfo = _read(f"{node_dir}/meminfo")
        mm = _MEMTOTAL.search(meminfo)
        if not mm:
            raise SysinfoError(f"{node_dir}/meminfo: no MemTotal")
        node.memory = int(mm.group(1)) * 1024
    except FileNotFoundError:
        log.warning("Found node without memory information: %s", node_dir)
    node.hugepages = _hugepages(f"{node_dir}/hugepages")
    try:
        node.distances = [int(d) for d in _read(f"{node_dir}/distance").split()]
    except FileNotFoundError:
        log.warning("Found node without distance information: %s", node_dir)
    return node


def discover(root: str = "/sys") -> MachineTopology:
    """GetTopology: NUMA nodes from node*/, or one node per socket without them."""
    online = _online_cpus(root)
    node_dirs = sorted(glob.glob(f"{root}/devices/system/node/node*[0-9]"))
    nodes: list[Node] = []
    if node_dirs:
        nodes = [_node(root, d, online) for d in node_dirs]
    else:
        cpu_dirs = sorted(glob.glob(f"{root}/devices/system/cpu/cpu*[0-9]"))
        by_socket: dict[int, list[str]] = {}
        for d in cpu_dirs:
            try:
                sock = _int(f"{d}/topology/physical_package_id")
            except FileNotFoundError:
                continue
            by_socket.setdefault(sock, []).append(d)
        for sock, dirs in sorted(by_socket.items()):
            node = Node(sock, _cores(root, dirs, online))
            try:
                _add_uncore_caches(root, node)
            except (OSError, ValueError, SysinfoError) as err:
                log.info("No cache information for socket %d: %s", sock, err)
            nodes.append(node)
    threads = [t for n in nodes for c in n.cores for t in c.threads]
    sockets = {c.socket_id for n in nodes for c in n.cores}
    return MachineTopology(nodes, len(threads), len(sockets))
