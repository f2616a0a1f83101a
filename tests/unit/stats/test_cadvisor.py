"""/metrics/cadvisor from the stats provider on a generated cgroup v2 tree: the
root, pod, sandbox and container rows with cAdvisor's names, labels and units,
one parse per scrape shared with /stats/summary and /metrics/resource, and the
text parsing prometheus_client's parser accepts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubelet.container.runtime import ContainerStatus, PodStatus, SandboxStatus
from kubelet.cri.api import api_pb2 as pb
from kubelet.nodestatus.machine import machine_info
from kubelet.stats import provider as prov
from kubelet.stats.cadvisor import cadvisor_registry
from kubelet.stats.netdev import parse_net_dev

CID = "c" * 64
SID = "s" * 64
POD = "kubepods/burstable/podu1"


def _cg(d: Path, usage_usec: int, user: int, system: int, current: int, anon: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.stat").write_text(
        f"usage_usec {usage_usec}\nuser_usec {user}\nsystem_usec {system}\n"
        "nr_periods 7\nnr_throttled 2\nthrottled_usec 3000\n"
    )
    (d / "memory.current").write_text(f"{current}\n")
    (d / "memory.stat").write_text(f"anon {anon}\nfile 400\ninactive_file 100\npgfault 9\n")
    (d / "memory.max").write_text("max\n")
    (d / "pids.current").write_text("3\n")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _key(metric: str, /, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return metric, tuple(sorted(labels.items()))


def test_cadvisor_rows_labels_and_values(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    _cg(root, 9_000_000, 5_000_000, 4_000_000, 10_000_000, 1)
    _cg(root / POD, 3_000_000, 2_000_000, 1_000_000, 5000, 3000)
    (root / POD / "cgroup.procs").write_text(f"{os.getpid()}\n")
    _cg(root / POD / CID, 2_500_000, 2_000_000, 500_000, 4000, 2500)
    _cg(root / POD / SID, 10_000, 5_000, 5_000, 600, 100)
    spec = {"name": "app", "image": "busybox", "resources": {"limits": {"cpu": "500m"}}}
    pod: dict[str, Any] = {
        "metadata": {"uid": "u1", "name": "web", "namespace": "ns"},
        "spec": {"containers": [spec]},
    }
    status = PodStatus(
        "u1",
        sandboxes=[SandboxStatus(SID, True, 1_700_000_000 * 10**9, 0)],
        containers=[
            ContainerStatus(CID, "app", "running", started_at=1_700_000_005 * 10**9, image="busybox:1"),
            ContainerStatus("d" * 64, "app", "exited", image="busybox:1"),  # no cgroup: skipped
        ],
    )  # fmt: skip
    asked: list[str] = []

    def resources(p: dict[str, Any], c: dict[str, Any]) -> pb.LinuxContainerResources:
        asked.append(c["name"])
        return pb.LinuxContainerResources(cpu_shares=512, cpu_quota=50000, cpu_period=100000)

    p = prov.StatsProvider(
        lambda: [pod], str(tmp_path), "node-x", mountinfo=str(mountinfo),
        pod_status=lambda u: status, container_resources=resources,
    )  # fmt: skip
    text = generate_latest(cadvisor_registry(p, machine_info())).decode()
    resource = generate_latest(prov.resource_registry(p)).decode()
    summary = p.summary()
    assert p.collections == 1  # one pass served all three
    got = _samples(text)
    ctr = dict(container="app", id=f"/{POD}/{CID}", image="busybox:1", name=CID, namespace="ns", pod="web")  # fmt: skip
    pod_row = dict(container="", id=f"/{POD}", image="", name="", namespace="ns", pod="web")
    sandbox = dict(container="", id=f"/{POD}/{SID}", image="", name=SID, namespace="ns", pod="web")
    assert got[_key("container_cpu_usage_seconds_total", cpu="total", **ctr)] == 2.5
    assert got[_key("container_cpu_user_seconds_total", **ctr)] == 2.0
    assert got[_key("container_cpu_system_seconds_total", **ctr)] == 0.5
    assert got[_key("container_memory_usage_bytes", **ctr)] == 4000
    assert got[_key("container_memory_working_set_bytes", **ctr)] == 3900
    assert got[_key("container_memory_rss", **ctr)] == 2500
    assert got[_key("container_memory_cache", **ctr)] == 400
    assert got[_key("container_spec_cpu_shares", **ctr)] == 512
    assert got[_key("container_spec_cpu_quota", **ctr)] == 50000
    assert got[_key("container_spec_cpu_period", **ctr)] == 100000
    assert got[_key("container_spec_memory_limit_bytes", **ctr)] == 0  # unlimited, as cAdvisor
    assert got[_key("container_cpu_cfs_throttled_periods_total", **ctr)] == 2
    assert got[_key("container_start_time_seconds", **ctr)] == 1_700_000_005
    assert got[_key("container_cpu_usage_seconds_total", cpu="total", **pod_row)] == 3.0
    assert got[_key("container_memory_usage_bytes", **sandbox)] == 600
    assert got[_key("container_start_time_seconds", **sandbox)] == 1_700_000_000
    root_row = dict(container="", id="/", image="", name="", namespace="", pod="")
    assert got[_key("container_cpu_usage_seconds_total", cpu="total", **root_row)] == 9.0
    # the pod row carries the pod's network namespace (here: the test's own)
    with open(f"/proc/{os.getpid()}/net/dev") as fh:
        ifaces = parse_net_dev(fh.read())
    for i in ifaces:
        k = _key("container_network_receive_bytes_total", interface=i.name, **pod_row)
        assert k in got
    assert not any(
        n.startswith("container_network") and dict(lbl).get("interface") == "lo" for n, lbl in got
    )
    assert asked == ["app"]
    assert got[_key("machine_cpu_cores", **_machine())] == machine_info().num_cores
    # the same figures in /stats/summary and /metrics/resource
    (pod_sum,) = summary["pods"]
    (c_sum,) = pod_sum["containers"]
    assert (c_sum["name"], c_sum["cpu"]["usageCoreNanoSeconds"]) == ("app", 2_500_000_000)
    assert c_sum["startTime"] == "2023-11-14T22:13:25Z"
    rgot = _samples(resource)
    assert rgot[_key("container_cpu_usage_seconds_total", container="app", namespace="ns", pod="web")] == 2.5  # fmt: skip
    assert rgot[_key("container_memory_working_set_bytes", container="app", namespace="ns", pod="web")] == 3900  # fmt: skip


def _machine() -> dict[str, str]:
    m = machine_info()
    return {"boot_id": m.boot_id, "machine_id": m.machine_id, "system_uuid": m.system_uuid}


def test_net_dev_parsing() -> None:
    text = (
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
        "    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n"
        "  eth0: 5000      40    1    2    0     0          0         0     7000      50    3    4    0     0       0          0\n"
        "  bad: x y\n"
    )  # fmt: skip
    (eth0,) = parse_net_dev(text)
    assert (eth0.name, eth0.rx_bytes, eth0.rx_packets, eth0.rx_errors, eth0.rx_dropped) == ("eth0", 5000, 40, 1, 2)  # fmt: skip
    assert (eth0.tx_bytes, eth0.tx_packets, eth0.tx_errors, eth0.tx_dropped) == (7000, 50, 3, 4)
