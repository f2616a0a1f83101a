"""The CPU, memory and topology manager settings: config file and flags,
validation, and what the kubelet refuses to start with (exit 1, upstream's
message)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.apis.config.types import KubeletConfiguration
from kubelet.apis.config.validation import validate_kubelet_configuration
from kubelet.cm.interfaces import ContainerManagerError
from kubelet.cm.node_container_manager import NodeAllocatableConfig, reservation
from kubelet.cm.resource_managers import apply_reserved_cpus
from kubelet.cmd.kubelet import UsageError, build_server
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kubelet import Kubelet
from kubelet.kubelet_subsystems import NodeSetup
from tests.unit.cm.topologies import topology, two_numa_nodes

CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
cpuManagerReconcilePeriod: 5s
memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits:
    memory: 1100Mi
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  max-allowable-numa-nodes: "9"
reservedSystemCPUs: "0"
kubeReserved:
  memory: 1Gi
"""


def test_fields_load_from_the_config_file_without_warnings(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(CONFIG)
    s, warnings, code = build_server(["--config", str(f)])
    assert code is None and s is not None, warnings
    assert not [w for w in warnings if "not implemented" in w]
    c = s.config
    assert (c.cpu_manager_policy, c.cpu_manager_policy_options) == (
        "static",
        {"full-pcpus-only": "true"},
    )
    assert c.cpu_manager_reconcile_period == 5.0
    assert (c.memory_manager_policy, c.reserved_memory) == (
        "Static",
        [{"numaNode": 0, "limits": {"memory": "1100Mi"}}],
    )
    assert (c.topology_manager_policy, c.topology_manager_scope) == ("single-numa-node", "pod")
    assert c.topology_manager_policy_options == {"max-allowable-numa-nodes": "9"}
    assert c.reserved_system_cpus == "0"


def test_defaults_and_zero_values_mean_default(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        'cpuManagerPolicy: ""\ncpuManagerReconcilePeriod: 0s\nmemoryManagerPolicy: ""\n'
        'topologyManagerPolicy: ""\ntopologyManagerScope: ""\n'
    )
    s, _, _ = build_server(["--config", str(f)])
    assert s is not None
    c = s.config
    assert (c.cpu_manager_policy, c.cpu_manager_reconcile_period, c.memory_manager_policy) == (
        "none",
        10.0,
        "None",
    )
    assert (c.topology_manager_policy, c.topology_manager_scope) == ("none", "container")


def test_flags() -> None:
    s, _, code = build_server(
        [
            "--cpu-manager-policy=static",
            "--cpu-manager-policy-options=full-pcpus-only=true",
            "--cpu-manager-policy-options=strict-cpu-reservation=true",
            "--cpu-manager-reconcile-period=3s",
            "--memory-manager-policy=Static",
            "--reserved-memory=0:memory=1Gi,hugepages-2Mi=2Mi;1:memory=2Gi",
            "--reserved-memory=2:memory=1Mi",
            "--topology-manager-policy=restricted",
            "--topology-manager-scope=pod",
            "--topology-manager-policy-options=prefer-closest-numa-nodes=true",
            "--reserved-cpus=0-1",
        ]
    )
    assert code is None and s is not None
    c = s.config
    assert c.cpu_manager_policy_options == {
        "full-pcpus-only": "true",
        "strict-cpu-reservation": "true",
    }
    assert c.cpu_manager_reconcile_period == 3.0
    assert c.reserved_memory == [
        {"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-2Mi": "2Mi"}},
        {"numaNode": 1, "limits": {"memory": "2Gi"}},
        {"numaNode": 2, "limits": {"memory": "1Mi"}},
    ]
    assert (c.topology_manager_policy, c.reserved_system_cpus) == ("restricted", "0-1")
    with pytest.raises(UsageError, match='unknown type: "cpu"'):
        build_server(["--reserved-memory=0:cpu=1"])


def test_validation_lists_every_problem_with_upstreams_wording() -> None:
    c = KubeletConfiguration()
    c.topology_manager_policy = "numa"
    c.topology_manager_scope = "node"
    c.cpu_manager_policy = "dynamic"
    c.memory_manager_policy = "static"
    c.reserved_system_cpus = "0-x"
    c.system_reserved_cgroup = "/system"
    c.reserved_memory = [
        {"numaNode": 0, "limits": {"memory": "1Gi"}},
        {"numaNode": 0, "limits": {"memory": "1Gi"}},
    ]
    errs = validate_kubelet_configuration(c)
    assert errs == [
        'invalid configuration: topologyManagerPolicy (--topology-manager-policy) "numa" must be one of: '
        '["none" "best-effort" "restricted" "single-numa-node"]',
        'invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: '
        '"container", or "pod"',
        'invalid configuration: cpuManagerPolicy (--cpu-manager-policy) "dynamic" must be one of: "none", or "static"',
        'invalid configuration: memoryManagerPolicy (--memory-manager-policy) "static" must be one of: '
        '"None", or "Static"',
        "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup "
        "(--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)",
        "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-x, error: "
        'strconv.Atoi: parsing "x": invalid syntax',
        "invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "
        '"memory"',
    ]


def test_reserved_system_cpus_replace_the_reserved_cpu() -> None:
    c = KubeletConfiguration()
    c.kube_reserved = {"cpu": "500m", "memory": "1Gi"}
    c.system_reserved = {"cpu": "100m"}
    c.reserved_system_cpus = "0,6"
    assert apply_reserved_cpus(c, topology("DualSocketHT")) == {0, 6}
    assert c.kube_reserved == {"memory": "1Gi"} and c.system_reserved == {"cpu": "2"}
    r = reservation(NodeAllocatableConfig.from_config(c), {"cpu": 16000, "memory": 16 << 30})
    assert r["cpu"] == 2000 and r["memory"] == (1 << 30) + (100 << 20)  # + evictionHard 100Mi


def test_eviction_percentage_counts_as_go_computes_it() -> None:
    c = KubeletConfiguration()
    c.eviction_hard = {"memory.available": "5%"}
    # float32(5)/100 * 16GiB truncated, as GetThresholdQuantity does.
    r = reservation(NodeAllocatableConfig.from_config(c), {"memory": 16 << 30})
    assert r["memory"] == 858993472


WIRING = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupsPerQOS: false
enforceNodeAllocatable: []
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
memoryManagerPolicy: Static
kubeReserved:
  memory: 1Gi
reservedMemory:
- numaNode: 1
  limits:
    memory: 1124Mi
topologyManagerPolicy: single-numa-node
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
"""


def test_fields_reach_the_managers(tmp_path: Path) -> None:
    """Through the file and flags into the Kubelet's managers, with the node
    allocatable reservation (kubeReserved + evictionHard) behind the memory one."""
    f = tmp_path / "c.yaml"
    f.write_text(WIRING)
    s, _, _ = build_server(
        [
            "--config", str(f), "--cpu-manager-reconcile-period=3s", "--reserved-cpus=2",
            "--topology-manager-scope=pod",
        ]
    )  # fmt: skip
    assert s is not None
    k = Kubelet(
        s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService(),
        node_setup=NodeSetup(machine_topology=two_numa_nodes()),
    )  # fmt: skip
    rm = k.resource_managers
    assert rm.cpu.policy is not None and rm.cpu.policy.opts.full_pcpus_only
    assert rm.cpu.policy.reserved == {2} and rm.cpu.reconcile_period == 3.0
    assert rm.memory.policy is not None
    assert rm.memory.policy.reserved == {0: {}, 1: {"memory": 1124 << 20}}
    assert (rm.topology.policy.name, rm.topology.scope) == ("single-numa-node", "pod")
    assert rm.topology.policy.opts.prefer_closest_numa
    assert k.runtime_manager.containers.resources is rm


def kubelet_with(tmp_path: Path, *flags: str) -> Kubelet:
    s, _, _ = build_server(["--cgroups-per-qos=false", "--enforce-node-allocatable=", *flags])
    assert s is not None
    tmp_path.mkdir()
    return Kubelet(
        s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService(),
        node_setup=NodeSetup(machine_topology=two_numa_nodes()),
    )  # fmt: skip


STATIC = ("--cpu-manager-policy=static", "--reserved-cpus=0")
BEST_EFFORT = "--topology-manager-policy=best-effort"


def test_option_gates_reach_the_managers(tmp_path: Path) -> None:
    strict = "--cpu-manager-policy-options=strict-cpu-reservation=true"
    k = kubelet_with(tmp_path / "beta", *STATIC, strict)
    assert k.resource_managers.cpu.policy is not None
    assert k.resource_managers.cpu.policy.opts.strict_cpu_reservation
    off = "--feature-gates=CPUManagerPolicyBetaOptions=false"
    with pytest.raises(ContainerManagerError, match="Beta-level Options not enabled"):
        kubelet_with(tmp_path / "beta-off", *STATIC, strict, off)
    cores = "--cpu-manager-policy-options=distribute-cpus-across-cores=true"
    with pytest.raises(ContainerManagerError, match="Alpha-level Options not enabled"):
        kubelet_with(tmp_path / "alpha-off", *STATIC, cores)
    on = "--feature-gates=CPUManagerPolicyAlphaOptions=true"
    k = kubelet_with(tmp_path / "alpha", *STATIC, cores, on)
    assert k.resource_managers.cpu.policy is not None
    assert k.resource_managers.cpu.policy.opts.distribute_across_cores

    closest = "--topology-manager-policy-options=prefer-closest-numa-nodes=true"
    off = "--feature-gates=TopologyManagerPolicyOptions=false"
    with pytest.raises(ContainerManagerError, match='require feature gates "TopologyManager'):
        kubelet_with(tmp_path / "topo-off", BEST_EFFORT, closest, off)
    numa = "--topology-manager-policy-options=max-allowable-numa-nodes=9"
    assert kubelet_with(tmp_path / "topo-beta", BEST_EFFORT, numa).resource_managers.topology
    off = "--feature-gates=TopologyManagerPolicyBetaOptions=false"
    with pytest.raises(ContainerManagerError, match="beta-level options not enabled"):
        kubelet_with(tmp_path / "topo-beta-off", BEST_EFFORT, numa, off)
    # v1.34 has no alpha topology option: the alpha gate admits nothing more.
    on = "--feature-gates=TopologyManagerPolicyAlphaOptions=true"
    with pytest.raises(ContainerManagerError, match='unknown Topology Manager Policy option: "x"'):
        kubelet_with(
            tmp_path / "topo-alpha", BEST_EFFORT, "--topology-manager-policy-options=x=1", on
        )


def test_cfs_quota_of_pinned_containers_follows_its_gate(tmp_path: Path) -> None:
    res = {"cpu": "1", "memory": "64Mi"}
    c = {"name": "c", "image": "i", "resources": {"requests": res, "limits": res}}
    pod = {"metadata": {"uid": "u1", "name": "p", "namespace": "d"}, "spec": {"containers": [c]}}
    for value in (True, False):
        gate = f"--feature-gates=DisableCPUQuotaWithExclusiveCPUs={str(value).lower()}"
        rm = kubelet_with(tmp_path / str(value), *STATIC, gate).resource_managers
        assert rm.admit(pod) is None
        pin = rm.container_cpuset(pod, c)
        assert pin.cpuset_cpus == "1" and pin.unlimited_quota is value
        assert rm.pod_has_exclusive_cpus(pod) is value
