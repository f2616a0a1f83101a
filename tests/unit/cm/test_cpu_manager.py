"""The CPU manager around its policy: the state file shared with the Go
kubelet, policy changes, releasing CPUs of pods that went away, and the
reconcile loop that moves running containers' cpusets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kubelet.cm.cpumanager.cpu_manager import Reservation, new_cpu_manager
from kubelet.cm.interfaces import RunningContainer
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.errors import CRIError
from kubelet.features import FeatureGate
from kubelet.util import cpuset
from tests.unit.cm.fixtures import Affinity, Pods, cm, gpod
from tests.unit.cm.topologies import cpus, topology, vectors


class Runtime:
    def __init__(self) -> None:
        self.updates: list[tuple[str, str]] = []
        self.fail: set[str] = set()
        self.updated = asyncio.Event()

    async def update_container_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None:
        if cid in self.fail:
            raise CRIError("UpdateContainerResources", "boom")
        self.updates.append((cid, linux.cpuset_cpus))
        self.updated.set()


def state_file(tmp: Path) -> dict[str, Any]:
    return json.loads((tmp / "cpu_manager_state").read_text())


def test_static_needs_reserved_cpu(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unable to determine reserved CPU resources"):
        cm(tmp_path, reserved=Reservation())
    with pytest.raises(ValueError, match=r"requires systemreserved\.cpu \+ kubereserved\.cpu"):
        cm(tmp_path, reserved=Reservation(cpu_millis=0))


def test_reservation_is_rounded_up_to_whole_cpus(tmp_path: Path) -> None:
    m = cm(tmp_path, reserved=Reservation(cpu_millis=1500))
    assert m.policy is not None and m.policy.reserved == cpus("0,6")


def test_none_policy_refuses_options_and_writes_its_state(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="None policy: received unsupported options"):
        cm(tmp_path, policy="none", full_pcpus_only="true")
    cm(tmp_path, policy="none")
    assert state_file(tmp_path)["policyName"] == "none"
    assert state_file(tmp_path)["defaultCpuSet"] == ""


def test_state_file_of_another_policy_is_refused_with_upstreams_error(tmp_path: Path) -> None:
    cm(tmp_path, policy="none")
    with pytest.raises(ValueError) as err:
        cm(tmp_path, policy="static")
    assert str(err.value) == (
        'could not restore state from checkpoint: configured policy "static" differs from state '
        'checkpoint policy "none", please drain this node and delete the CPU manager checkpoint '
        f'file "{tmp_path}/cpu_manager_state" before restarting Kubelet'
    )


def test_allocation_is_written_through_and_survives_a_restart(tmp_path: Path) -> None:
    pods = Pods()
    m = cm(tmp_path, pods)
    pod = gpod("u1", [{"name": "app", "cpu": "2"}])
    pods.pods["u1"] = pod
    m.allocate(pod, pod["spec"]["containers"][0])
    mine = m.exclusive_cpus("u1", "app")
    doc = state_file(tmp_path)
    assert doc["entries"] == {"u1": {"app": cpuset.format_cpus(mine)}}
    assert doc["defaultCpuSet"] == cpuset.format_cpus(cpus("0-11") - mine)
    again = cm(tmp_path, pods)
    assert again.exclusive_cpus("u1", "app") == mine
    assert again.cpu_affinity("u1", "other") == cpus("0-11") - mine


def test_file_written_by_the_go_kubelet_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(vectors("cpu_checkpoint.json")["upstreamFile"])
    pods = Pods()
    pods.pods["pod-a"] = gpod("pod-a", [{"name": "app", "cpu": "2"}])
    m = cm(tmp_path, pods, topo="SingleSocketHT")
    assert m.exclusive_cpus("pod-a", "app") == cpus("2-3")
    assert m.cpu_affinity("pod-a", "x") == cpus("0-1,4-5,7")
    # pod-b is not active any more: its CPU goes back to the shared pool.
    m.remove_stale_state()
    assert m.state.get_default_cpuset() == cpus("0-1,4-7")
    assert "pod-b" not in state_file(tmp_path).get("entries", {})


def test_pods_that_went_away_release_their_cpus_on_the_next_allocation(tmp_path: Path) -> None:
    pods = Pods()
    m = cm(tmp_path, pods)
    a = gpod("a", [{"name": "c", "cpu": "4"}])
    pods.pods["a"] = a
    m.allocate(a, a["spec"]["containers"][0])
    assert len(m.state.get_default_cpuset()) == 8
    del pods.pods["a"]
    b = gpod("b", [{"name": "c", "cpu": "1"}])
    pods.pods["b"] = b
    m.allocate(b, b["spec"]["containers"][0])
    assert m.exclusive_cpus("a", "c") == set()
    assert len(m.state.get_default_cpuset()) == 11


def test_stale_state_waits_for_the_sources(tmp_path: Path) -> None:
    pods = Pods()
    ready = [False]
    m = new_cpu_manager("static", {}, 10.0, topology("DualSocketHT"), Reservation(cpu_millis=1000),
                        str(tmp_path), Affinity(), FeatureGate(), pods, lambda: ready[0])  # fmt: skip
    a = gpod("a", [{"name": "c", "cpu": "2"}])
    m.allocate(a, a["spec"]["containers"][0])  # "a" unknown to the sources yet
    m.remove_stale_state()
    assert m.exclusive_cpus("a", "c")
    ready[0] = True
    m.remove_stale_state()
    assert not m.exclusive_cpus("a", "c")


async def test_reconcile_moves_shared_containers_off_exclusive_cpus(tmp_path: Path) -> None:
    pods, rt = Pods(), Runtime()
    m = cm(tmp_path, pods)
    be = {"metadata": {"uid": "be"}, "spec": {"containers": [{"name": "c"}]}}
    g = gpod("g", [{"name": "c", "cpu": "2"}])
    pods.pods.update(be=be, g=g)
    pods.running["be"] = [RunningContainer("c", "cid-be")]
    assert await m.reconcile(rt) == [("be", "c")]
    assert rt.updates == [("cid-be", "0-11")]
    # Nothing changed: nothing is sent again.
    assert await m.reconcile(rt) == []
    m.allocate(g, g["spec"]["containers"][0])
    m.add_container(g, g["spec"]["containers"][0], "cid-g")
    pods.running["g"] = [RunningContainer("c", "cid-g")]
    await m.reconcile(rt)
    shared = cpus("0-11") - m.exclusive_cpus("g", "c")
    assert rt.updates[-1] == ("cid-be", cpuset.format_cpus(shared))
    # g was created with its CPUs (add_container): no update for it.
    assert all(cid != "cid-g" for cid, _ in rt.updates)
    # g goes away: the shared pool grows back.
    del pods.pods["g"], pods.running["g"]
    await m.reconcile(rt)
    assert rt.updates[-1] == ("cid-be", "0-11")


async def test_reconcile_failure_is_retried(tmp_path: Path) -> None:
    pods, rt = Pods(), Runtime()
    m = cm(tmp_path, pods)
    pods.pods["be"] = {"metadata": {"uid": "be"}, "spec": {"containers": [{"name": "c"}]}}
    pods.running["be"] = [RunningContainer("c", "cid-be")]
    rt.fail.add("cid-be")
    assert await m.reconcile(rt) == []
    rt.fail.clear()
    assert await m.reconcile(rt) == [("be", "c")]


async def test_run_loop_reconciles_every_period_and_stops(tmp_path: Path) -> None:
    pods, rt = Pods(), Runtime()
    m = new_cpu_manager("static", {}, 0.01, topology("DualSocketHT"), Reservation(cpu_millis=1000),
                        str(tmp_path), Affinity(), FeatureGate(), pods, lambda: True)  # fmt: skip
    pods.pods["be"] = {"metadata": {"uid": "be"}, "spec": {"containers": [{"name": "c"}]}}
    pods.running["be"] = [RunningContainer("c", "cid-be")]
    stop = asyncio.Event()
    task = asyncio.create_task(m.run(stop, rt))
    await asyncio.wait_for(rt.updated.wait(), 30)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert rt.updates[0] == ("cid-be", "0-11")
