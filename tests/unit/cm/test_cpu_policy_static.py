"""The static CPU manager policy: allocation, release, reserved CPUs, options,
state validation and hints, on fake topologies."""

from __future__ import annotations

from typing import Any

import pytest

from kubelet.cm.cpumanager.policy_static import SMTAlignmentError, StaticPolicy
from kubelet.cm.cpumanager.state import CPUManagerState
from kubelet.cm.topologymanager import bitmask
from kubelet.cm.topologymanager.policy import TopologyHint
from kubelet.features import FeatureGate
from kubelet.util import cpuset
from tests.unit.cm.fixtures import Affinity, gpod
from tests.unit.cm.topologies import cpus, topology, vectors

ALL_GATES = FeatureGate({"CPUManagerPolicyAlphaOptions": True})


def policy(topo: str, reserved: int = 1, reserved_cpus: str = "", affinity: Affinity | None = None,
           **opts: str) -> tuple[StaticPolicy, CPUManagerState]:  # fmt: skip
    p = StaticPolicy(
        topology(topo), reserved, cpus(reserved_cpus), affinity or Affinity(),
        {k.replace("_", "-"): v for k, v in opts.items()}, ALL_GATES,
    )  # fmt: skip
    s = CPUManagerState("static")
    p.start(s)
    return p, s


def test_reserved_cpus_are_taken_by_topology_from_the_first_core() -> None:
    p, s = policy("SingleSocketHT", reserved=2)
    assert p.reserved == cpus("0,4")  # both threads of core 0
    assert s.get_default_cpuset() == cpus("0-7")
    assert p.allocatable_cpus(s) == cpus("1-3,5-7")


def test_reserved_system_cpus_are_used_as_given() -> None:
    p, _ = policy("SingleSocketHT", reserved=1, reserved_cpus="3")
    assert p.reserved == cpus("3")
    assert p.reserved_physical == cpus("3,7")


def test_guaranteed_integer_request_gets_exclusive_cpus_and_release_restores_them() -> None:
    p, s = policy("DualSocketHT", reserved=1)
    pod = gpod("u1", [{"name": "app", "cpu": "2"}])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    mine = s.get_cpuset("u1", "app")
    assert mine is not None and len(mine) == 2 and not mine & p.reserved
    assert s.get_default_cpuset() == cpus("0-11") - mine
    p.remove_container(s, "u1", "app")
    assert s.get_default_cpuset() == cpus("0-11")
    assert s.get_cpuset("u1", "app") is None


def test_fractional_and_non_guaranteed_requests_stay_on_the_shared_pool() -> None:
    p, s = policy("DualSocketHT")
    frac = gpod("u1", [{"name": "a", "cpu": "1500m"}])
    p.allocate(s, frac, frac["spec"]["containers"][0])
    burstable = {
        "metadata": {"uid": "u2"},
        "spec": {"containers": [{"name": "b", "resources": {"requests": {"cpu": "2"}}}]},
    }
    p.allocate(s, burstable, burstable["spec"]["containers"][0])
    assert s.get_assignments() == {}
    assert s.get_default_cpuset() == cpus("0-11")


def test_pod_level_resources_skip_exclusive_allocation() -> None:
    p, s = policy("DualSocketHT")
    pod = gpod("u1", [{"name": "a", "cpu": "2"}])
    pod["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    p.allocate(s, pod, pod["spec"]["containers"][0])
    assert s.get_assignments() == {}


def test_init_container_cpus_are_reused_by_the_app_container() -> None:
    p, s = policy("DualSocketHT")
    pod = gpod("u1", [{"name": "init", "cpu": "2", "init": True}, {"name": "app", "cpu": "2"}])
    p.allocate(s, pod, pod["spec"]["initContainers"][0])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    assert s.get_cpuset("u1", "app") == s.get_cpuset("u1", "init")
    # Releasing the init container keeps what the app container still holds.
    before = s.get_default_cpuset()
    p.remove_container(s, "u1", "init")
    assert s.get_default_cpuset() == before


def test_sidecar_cpus_are_not_reused() -> None:
    p, s = policy("DualSocketHT")
    pod = gpod(
        "u1",
        [{"name": "side", "cpu": "2", "init": True, "sidecar": True}, {"name": "app", "cpu": "2"}],
    )
    p.allocate(s, pod, pod["spec"]["initContainers"][0])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    side, app = s.get_cpuset("u1", "side"), s.get_cpuset("u1", "app")
    assert side and app and not side & app


def test_numa_hint_is_followed() -> None:
    aff = Affinity()
    p, s = policy("DualSocketHT", affinity=aff)
    aff.hints[("u1", "app")] = TopologyHint(bitmask.new_bitmask([1]), True)
    pod = gpod("u1", [{"name": "app", "cpu": "2"}])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    got = s.get_cpuset("u1", "app") or cpuset.EMPTY
    assert {topology("DualSocketHT").details[c].numa for c in got} == {1}


def test_full_pcpus_only_refuses_odd_requests_with_smt_alignment_error() -> None:
    p, s = policy("DualSocketHT", full_pcpus_only="true")
    pod = gpod("u1", [{"name": "app", "cpu": "3"}])
    with pytest.raises(SMTAlignmentError) as err:
        p.allocate(s, pod, pod["spec"]["containers"][0])
    assert err.value.reason == "SMTAlignmentError"
    assert str(err.value) == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"


def test_full_pcpus_only_counts_reserved_siblings_as_unavailable() -> None:
    # Reserving CPU 0 alone takes core {0,6} out of full-core allocations.
    p, s = policy("DualSocketHT", reserved=1, reserved_cpus="0", full_pcpus_only="true")
    pod = gpod("u1", [{"name": "app", "cpu": "12"}])
    with pytest.raises(
        SMTAlignmentError, match="available physical CPUs = 10, requested CPUs = 12"
    ):
        p.allocate(s, pod, pod["spec"]["containers"][0])


def test_strict_cpu_reservation_keeps_reserved_cpus_out_of_the_shared_pool() -> None:
    p, s = policy("DualSocketHT", reserved=2, strict_cpu_reservation="true")
    assert not s.get_default_cpuset() & p.reserved
    assert s.get_default_cpuset() | p.reserved == cpus("0-11")


def test_option_errors_are_upstreams() -> None:
    with pytest.raises(ValueError, match="can not be used at the same time"):
        policy("DualSocketHT", full_pcpus_only="true", distribute_cpus_across_cores="true")
    with pytest.raises(ValueError, match='bad value for option "full-pcpus-only"'):
        policy("DualSocketHT", full_pcpus_only="maybe")
    with pytest.raises(ValueError, match='unknown CPU Manager Policy option: "nope"'):
        policy("DualSocketHT", nope="true")
    with pytest.raises(ValueError, match="Alpha-level Options not enabled"):
        StaticPolicy(topology("DualSocketHT"), 1, cpuset.EMPTY, Affinity(),
                     {"align-by-socket": "true"}, FeatureGate())  # fmt: skip
    with pytest.raises(ValueError, match="incompatible with CPUManager align-by-socket"):
        policy("DualSocketHT", affinity=Affinity("single-numa-node"), align_by_socket="true")


def test_state_from_a_different_machine_is_refused() -> None:
    p, _ = policy("DualSocketHT")
    s = CPUManagerState("static")
    s.set_default_cpuset(cpus("0-7"))  # four CPUs gone
    with pytest.raises(ValueError, match="current set of available CPUs"):
        p.start(s)
    s = CPUManagerState("static")
    s.set_default_cpuset(cpus("1-11"))  # the reserved CPU 0 handed out
    s.set_cpuset("u", "c", cpus("0"))
    with pytest.raises(ValueError, match="not all reserved cpus"):
        p.start(s)
    s = CPUManagerState("static")
    s.set_default_cpuset(cpus("0-11"))
    s.set_cpuset("u", "c", cpus("3"))
    with pytest.raises(ValueError, match="overlaps with default cpuset"):
        p.start(s)


def test_hints_for_an_allocated_container_of_another_size_cannot_be_satisfied() -> None:
    p, s = policy("DualSocketHT")
    s.set_cpuset("u1", "app", cpus("2"))
    pod = gpod("u1", [{"name": "app", "cpu": "2"}])
    assert p.get_topology_hints(s, pod, pod["spec"]["containers"][0]) == {"cpu": []}


def test_generate_hints_matches_go_vectors() -> None:
    for v in vectors("cpumanager.json")["hints"]:
        p, _ = policy(v["topology"])
        p.opts = type(p.opts)(align_by_socket=v.get("alignBySocket", False))
        got = p.generate_hints(
            cpuset.parse(v["available"]), cpuset.parse(v["reusable"]), v["request"]
        )
        want = [h.rsplit(":", 1) for h in v["hints"]]
        assert [
            (str(bitmask.get_bits(h.numa_affinity or 0)).replace(",", ""), str(h.preferred).lower())
            for h in got
        ] == [(bits, pref) for bits, pref in want], v


def _scenario_policy(sc: dict[str, Any]) -> tuple[StaticPolicy, CPUManagerState]:
    aff = Affinity()
    p = StaticPolicy(
        topology(sc["topology"]), sc["numReserved"], cpuset.parse(sc["reservedCPUs"]), aff,
        sc["options"], ALL_GATES,
    )  # fmt: skip
    s = CPUManagerState("static")
    p.start(s)
    return p, s


def test_allocate_and_remove_sequences_match_go_vectors() -> None:
    """Whole sequences through the upstream policy: each step's error, the
    container's CPUs and the shared pool must be what the Go code produced."""
    scenarios = vectors("cpumanager.json")["scenarios"]
    assert len(scenarios) >= 100
    for sc in scenarios:
        if sc.get("policyErr"):
            with pytest.raises(ValueError) as err:
                _scenario_policy(sc)
            assert str(err.value) == sc["policyErr"].removeprefix("start: "), sc
            continue
        p, s = _scenario_policy(sc)
        aff = p.affinity
        assert isinstance(aff, Affinity)
        pods: dict[str, dict[str, Any]] = {}
        for step in sc["steps"]:
            if step["op"] == "remove":
                p.remove_container(s, step["pod"], step["container"])
                assert cpuset.format_cpus(s.get_default_cpuset()) == step["default"], (sc, step)
                continue
            if step.get("containers"):
                pods[step["pod"]] = gpod(step["pod"], step["containers"])
                for c in step["containers"]:
                    if c.get("hint"):
                        aff.hints[(step["pod"], c["name"])] = TopologyHint(
                            bitmask.new_bitmask(c["hint"]), True
                        )
            pod = pods[step["pod"]]
            ctr = next(
                c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]
                if c["name"] == step["container"]
            )  # fmt: skip
            err = ""
            try:
                p.allocate(s, pod, ctr)
            except Exception as e:  # compared with the Go error text below
                err = str(e)
            assert err == step.get("err", ""), (sc, step)
            assert cpuset.format_cpus(s.get_default_cpuset()) == step["default"], (sc, step)
            got = s.get_cpuset(step["pod"], step["container"])
            assert (cpuset.format_cpus(got) if got is not None else "") == step.get(
                "assigned", ""
            ), (sc, step)


def test_pod_level_resources_gate_off_allocates_as_before() -> None:
    p = StaticPolicy(
        topology("DualSocketHT"), 1, cpuset.EMPTY, Affinity(), {},
        FeatureGate({"PodLevelResources": False}),
    )  # fmt: skip
    s = CPUManagerState("static")
    p.start(s)
    pod = gpod("u1", [{"name": "a", "cpu": "2"}])
    # As the API server defaults it: pod-level requests from the limits.
    pod["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    pod["spec"]["resources"]["requests"] = dict(pod["spec"]["resources"]["limits"])
    p.allocate(s, pod, pod["spec"]["containers"][0])
    assert s.get_cpuset("u1", "a") is not None
