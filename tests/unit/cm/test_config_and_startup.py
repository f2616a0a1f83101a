"""The CPU, memory and topology manager settings: config file and flags,
validation, and what the kubelet refuses to start with (exit 1, upstream's
message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubelet.apis.config.types import KubeletConfiguration
from kubelet.apis.config.validation import validate_kubelet_configuration
from kubelet.cm.container_manager import apply_reserved_cpus, node_allocatable_reservation
from kubelet.cmd.kubelet import UsageError, build_server
from tests.unit.cm.topologies import topology

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
    r = node_allocatable_reservation(c, 16 << 30)
    assert r["cpu"] == 2 and r["memory"] == (1 << 30) + (100 << 20)  # + evictionHard 100Mi


def test_eviction_percentage_counts_as_go_computes_it() -> None:
    c = KubeletConfiguration()
    c.eviction_hard = {"memory.available": "5%"}
    # float32(5)/100 * 16GiB truncated, as GetThresholdQuantity does.
    assert node_allocatable_reservation(c, 16 << 30)["memory"] == 858993472


def run_kubelet(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    base = [
        sys.executable, "-m", "kubelet", "--root-dir", str(tmp),
        "--container-runtime-endpoint", f"unix://{tmp}/none.sock", "--port", "41999",
        "--healthz-port", "0", "--read-only-port", "0", "--oom-score-adj", "0",
        "--authorization-mode", "AlwaysAllow", "--authentication-token-webhook=false",
    ]  # fmt: skip
    return subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)


def test_static_policy_without_reserved_cpu_does_not_start(tmp_path: Path) -> None:
    r = run_kubelet(tmp_path, "--cpu-manager-policy=static")
    assert r.returncode == 1
    assert (
        "start cpu manager error: [cpumanager] unable to determine reserved CPU resources for static policy"
        in r.stderr
    )


def test_state_file_of_another_policy_stops_the_kubelet(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(
        '{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438}'
    )
    r = run_kubelet(tmp_path)
    assert r.returncode == 1
    assert (
        'start cpu manager error: could not restore state from checkpoint: configured policy "none" '
        'differs from state checkpoint policy "static", please drain this node and delete the CPU '
        f'manager checkpoint file "{tmp_path}/cpu_manager_state" before restarting Kubelet'
    ) in r.stderr


def test_reserved_cpus_must_be_online(tmp_path: Path) -> None:
    r = run_kubelet(tmp_path, "--cpu-manager-policy=static", "--reserved-cpus=4095")
    assert r.returncode == 1
    assert "reserved-cpus: 4095 is not a subset of online-cpus:" in r.stderr


def test_memory_manager_reservation_must_match_node_allocatable(tmp_path: Path) -> None:
    r = run_kubelet(tmp_path, "--memory-manager-policy=Static", "--reserved-memory=0:memory=1Gi")
    assert r.returncode == 1
    assert (
        'start memory manager error: the total amount "1Gi" of type "memory" is not equal to the value '
        '"100Mi" determined by Node Allocatable feature'
    ) in r.stderr
