"""Machine topology from sysfs (cadvisor's GetTopology), on fixture trees."""

from __future__ import annotations

from pathlib import Path

from kubelet.cm.cpumanager.topology import CPUInfo
from kubelet.cm.cpumanager.topology import discover as discover_cpus
from kubelet.cm.sysinfo import discover


def build_sysfs(root: Path, sockets: int, numa_per_socket: int, cores_per_numa: int, smt: int,
                l3_per_numa: int = 1, online: str | None = None) -> None:  # fmt: skip
    """A machine like the kernel shows it: CPU IDs numbered core-major, thread
    siblings at +ncores (as on Intel), core_id unique within a socket only."""
    ncores = sockets * numa_per_socket * cores_per_numa
    ncpus = ncores * smt
    cpu_root = root / "devices/system/cpu"
    for cpu in range(ncpus):
        core = cpu % ncores
        numa = core // cores_per_numa
        socket = numa // numa_per_socket
        d = cpu_root / f"cpu{cpu}"
        (d / "topology").mkdir(parents=True)
        (d / "topology/core_id").write_text(f"{core % (numa_per_socket * cores_per_numa)}\n")
        (d / "topology/physical_package_id").write_text(f"{socket}\n")
        cores_per_l3 = cores_per_numa // l3_per_numa
        caches = [(1, "Data", 1 << smt), (2, "Unified", smt), (3, "Unified", cores_per_l3 * smt)]
        for i, (level, kind, sharing) in enumerate(caches):
            c = d / f"cache/index{i}"
            c.mkdir(parents=True)
            (c / "level").write_text(f"{level}\n")
            (c / "type").write_text(f"{kind}\n")
            (c / "size").write_text("1024K\n")
            l3_id = numa * l3_per_numa + (core % cores_per_numa) // cores_per_l3
            (c / "id").write_text(f"{l3_id if level == 3 else core}\n")
            (c / "shared_cpu_map").write_text(format((1 << min(sharing, 32)) - 1, "08x") + "\n")
        node = root / f"devices/system/node/node{numa}"
        node.mkdir(parents=True, exist_ok=True)
        (node / f"cpu{cpu}").mkdir()
    for numa in range(sockets * numa_per_socket):
        node = root / f"devices/system/node/node{numa}"
        (node / "meminfo").write_text(
            f"Node {numa} MemTotal:       16384000 kB\nNode {numa} MemFree: 1 kB\n"
        )
        dist = " ".join("10" if i == numa else "21" for i in range(sockets * numa_per_socket))
        (node / "distance").write_text(dist + "\n")
        hp = node / "hugepages/hugepages-2048kB"
        hp.mkdir(parents=True)
        (hp / "nr_hugepages").write_text("512\n")
    if online is not None:
        (cpu_root / "online").write_text(online + "\n")


def test_two_sockets_two_numa_smt(tmp_path: Path) -> None:
    build_sysfs(tmp_path, sockets=2, numa_per_socket=1, cores_per_numa=3, smt=2)
    m = discover(str(tmp_path))
    assert (m.num_cores, m.num_sockets, [n.id for n in m.nodes]) == (12, 2, [0, 1])
    assert m.nodes[0].memory == 16384000 * 1024
    assert m.nodes[1].distances == [21, 10]
    assert [(h.page_size_kb, h.num_pages) for h in m.nodes[0].hugepages] == [(2048, 512)]
    topo = discover_cpus(m)
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (12, 6, 2, 2)
    # Core IDs are the lowest thread ID (core_id alone repeats across sockets).
    assert topo.details[9] == CPUInfo(numa=1, socket=1, core=3, uncore=topo.details[3].uncore)
    assert topo.details.cpus_in_cores(3) == {3, 9}
    assert topo.cpus_per_core() == 2


def test_uncore_caches_smaller_than_a_node(tmp_path: Path) -> None:
    build_sysfs(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=8, smt=1, l3_per_numa=2)
    topo = discover_cpus(discover(str(tmp_path)))
    assert topo.num_uncore_cache == 2
    assert topo.details.cpus_in_uncore_caches(topo.details[0].uncore) == {0, 1, 2, 3}


def test_node_level_l3_falls_back_to_the_socket(tmp_path: Path) -> None:
    build_sysfs(tmp_path, sockets=2, numa_per_socket=2, cores_per_numa=2, smt=2)
    topo = discover_cpus(discover(str(tmp_path)))
    # The L3 spans the whole NUMA node: no uncore cache, the socket stands in.
    assert {i.uncore for _, i in topo.details.items()} == {0, 1}
    assert topo.num_numa_nodes == 4 and topo.num_sockets == 2


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    build_sysfs(tmp_path, sockets=1, numa_per_socket=1, cores_per_numa=4, smt=1, online="0-2")
    m = discover(str(tmp_path))
    assert m.num_cores == 3
    assert discover_cpus(m).details.cpus() == {0, 1, 2}


def test_this_machine() -> None:
    m = discover()
    topo = discover_cpus(m)
    assert topo.num_cpus == m.num_cores >= 1
    assert topo.details.cpus()
