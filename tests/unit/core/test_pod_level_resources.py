"""Pod-level resources (spec.resources, KEP-2837) as upstream v1.34 honours them:
the numbers are those of upstream's own tables (helpers_linux_test.go's
ResourceConfigForPod cases, qos_test.go, policy_test.go)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kubelet.allocation.allocation_manager import POD_LEVEL_MESSAGE, resize_allowed
from kubelet.cm.cgroup_manager import pod_resources
from kubelet.config.common import ManifestError, apply_defaults
from kubelet.kuberuntime.kuberuntime_container_linux import (
    NodeSettings,
    container_resources,
    oom_score_adj,
)
from kubelet.lifecycle.features import admit_pod_features
from kubelet.lifecycle.predicate import Admitter
from kubelet.resourcehelper import pod_limits, pod_requests, resource_request
from kubelet.types import Container, Node, Pod, as_pod, qos_class
from kubelet.unsupported import unsupported_fields
from tests.unit.eviction.helpers import GiB, Harness, MiB

Mi = 2**20


def rl(cpu: str = "", memory: str = "") -> dict[str, str]:
    return {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}


def mkpod(
    pod_req: dict[str, str] | None = None,
    pod_lim: dict[str, str] | None = None,
    containers: list[Container] | None = None,
    name: str = "p",
) -> Pod:
    spec: dict[str, Any] = {"containers": containers or [{"name": "c"}]}
    if pod_req is not None or pod_lim is not None:
        spec["resources"] = {}
        if pod_req is not None:
            spec["resources"]["requests"] = pod_req
        if pod_lim is not None:
            spec["resources"]["limits"] = pod_lim
    return as_pod({"metadata": {"uid": name, "name": name, "namespace": "ns"}, "spec": spec})


def ctr(req: dict[str, str], lim: dict[str, str], name: str = "c") -> Container:
    return cast(Container, {"name": name, "resources": {"requests": req, "limits": lim}})


# --- the pod cgroup (ResourceConfigForPod) ---------------------------------


def test_pod_level_requests_alone_give_shares_and_no_limits() -> None:
    p = mkpod(rl("100m", "100Mi"))
    assert pod_resources(p) == {"cpu_shares": 102}


def test_pod_level_requests_win_over_the_containers() -> None:
    p = mkpod(rl("100m", "100Mi"), containers=[ctr(rl("10m", "50Mi"), {})])
    assert pod_resources(p) == {"cpu_shares": 102}


LIMITED = [ctr(rl("10m", "50Mi"), rl("50m", "100Mi"))]


@pytest.mark.parametrize(
    ("limits", "containers", "qos", "quota", "memory"),
    [
        # Burstable: without pod-level limits, a container without its own
        # would leave the pod cgroup unlimited; the pod-level ones also win
        # over the containers' own.
        (rl("200m", "200Mi"), None, "Burstable", 20000, 200 * Mi),
        (rl("200m", "200Mi"), LIMITED, "Burstable", 20000, 200 * Mi),
        # Guaranteed at pod level, whatever the containers set.
        (rl("100m", "100Mi"), None, "Guaranteed", 10000, 100 * Mi),
        (rl("100m", "100Mi"), LIMITED, "Guaranteed", 10000, 100 * Mi),
    ],
)
def test_pod_level_limits_set_the_pod_cgroup(
    limits: dict[str, str],
    containers: list[Container] | None,
    qos: str,
    quota: int,
    memory: int,
) -> None:
    p = mkpod(rl("100m", "100Mi"), limits, containers)
    assert qos_class(p) == qos
    assert pod_resources(p) == {
        "cpu_shares": 102,
        "cpu_quota": quota,
        "cpu_period": 100000,
        "memory_limit": memory,
    }


def test_only_a_cpu_limit_at_pod_level_leaves_memory_unlimited() -> None:
    p = mkpod(rl("100m", "100Mi"), rl("500m"))
    assert pod_resources(p) == {"cpu_shares": 102, "cpu_quota": 50000, "cpu_period": 100000}


def test_overhead_is_added_to_pod_level_values() -> None:
    p = mkpod(rl("100m", "100Mi"), rl("200m", "200Mi"))
    p["spec"]["overhead"] = {"cpu": "100m", "memory": "10Mi"}
    assert pod_resources(p)["cpu_shares"] == 204  # 200m
    assert pod_resources(p)["cpu_quota"] == 30000
    assert pod_resources(p)["memory_limit"] == 210 * Mi


# --- QoS (ComputePodQOS) ---------------------------------------------------


def test_qos_from_pod_level_resources() -> None:
    # Containers set nothing: the pod-level fields decide.
    assert qos_class(mkpod(rl("1", "1Gi"), rl("1", "1Gi"))) == "Guaranteed"
    assert qos_class(mkpod(rl("1", "1Gi"), rl("2", "1Gi"))) == "Burstable"
    assert qos_class(mkpod(rl("1", "1Gi"), rl("1"))) == "Burstable"  # no memory limit
    assert qos_class(mkpod(rl("1"))) == "Burstable"
    # The containers are not read once the pod sets spec.resources.
    guaranteed_ctr = [ctr(rl("1", "1Gi"), rl("1", "1Gi"))]
    assert qos_class(mkpod(rl("1", "1Gi"), rl("2", "2Gi"), guaranteed_ctr)) == "Burstable"
    assert qos_class(mkpod({"example.com/x": "1"}, None, guaranteed_ctr)) == "BestEffort"


# --- PodRequests / PodLimits and admission --------------------------------


def test_pod_requests_take_pod_level_values_per_resource() -> None:
    p = mkpod(rl("2"), None, [ctr(rl("100m", "64Mi"), {}), ctr(rl("100m", "64Mi"), {}, "d")])
    assert pod_requests(p) == {"cpu": 2000, "memory": 128 * Mi}
    assert pod_limits(p) == {}
    # Unsupported names at pod level are skipped, as upstream's helpers.
    p["spec"]["resources"]["requests"]["example.com/x"] = "3"
    assert pod_requests(p) == {"cpu": 2000, "memory": 128 * Mi}


NODE: Node = {"metadata": {"name": "n"}}


def test_admission_fits_by_the_pod_level_requests() -> None:
    a = Admitter(max_pods=10, allocatable_cpu_m=1000, allocatable_memory=4 * GiB)
    small_containers = [ctr(rl("100m", "64Mi"), {})]
    refused = a.admit("big", mkpod(rl("1500m", "1Gi"), None, small_containers), NODE)
    assert refused is not None and refused.reason == "OutOfcpu"
    assert "requested: 1500" in refused.message
    assert a.admit("fits", mkpod(rl("600m", "1Gi"), None, small_containers, "fits"), NODE) is None
    assert a.used.cpu_m == 600 and a.used.memory == GiB
    refused = a.admit("more", mkpod(rl("500m"), None, small_containers, "more"), NODE)
    assert refused is not None and refused.reason == "OutOfcpu"


def test_a_pod_with_pod_level_resources_is_refused_while_the_gate_is_off() -> None:
    p = mkpod(rl("1", "1Gi"))
    refused = admit_pod_features(p, pod_level_resources=False)
    assert refused is not None
    assert refused.reason == "PodLevelResourcesNotSupported"
    assert refused.message == "PodLevelResources feature gate is disabled"
    assert admit_pod_features(p, pod_level_resources=True) is None
    assert admit_pod_features(mkpod(), pod_level_resources=False) is None


# --- eviction ranking (GetResourceRequest) --------------------------------


def test_eviction_request_is_the_pod_level_one() -> None:
    p = mkpod(rl(memory="512Mi"), None, [ctr(rl(memory="64Mi"), {})])
    assert resource_request(p, "memory") == 512 * Mi
    # Pod-level resources set without memory: upstream reads the pod level alone.
    assert resource_request(mkpod(rl("1"), None, [ctr(rl(memory="64Mi"), {})]), "memory") == 0


async def test_eviction_ranks_by_usage_above_the_pod_level_request() -> None:
    h = Harness(eviction_hard={"memory.available": "100Mi"})
    # Both use 300Mi; "a" asked for 512Mi at pod level (its containers 1Mi), so
    # only "b" is over its request and goes first.
    a = mkpod(rl(memory="512Mi"), None, [ctr(rl(memory="1Mi"), {})], "a")
    b = mkpod(None, None, [ctr(rl(memory="1Mi"), {})], "b")
    h.pods = [dict(a), dict(b)]
    h.usage = {"a": 300 * MiB, "b": 300 * MiB}
    h.available = 50 * MiB
    await h.m.synchronize()
    assert [e[0] for e in h.evictions] == ["b"]


# --- container resources and oom_score_adj --------------------------------


def test_a_container_without_limits_gets_the_pod_level_ones() -> None:
    p = mkpod(rl("100m", "100Mi"), rl("200m", "200Mi"), [ctr({}, {}), ctr({}, rl("50m"), "d")])
    node = NodeSettings(node_memory=8 * GiB)
    free = container_resources(p, p["spec"]["containers"][0], node)
    assert (free.cpu_quota, free.cpu_period, free.memory_limit_in_bytes) == (
        20000,
        100000,
        200 * Mi,
    )
    own = container_resources(p, p["spec"]["containers"][1], node)
    assert (own.cpu_quota, own.memory_limit_in_bytes) == (5000, 200 * Mi)
    # A zero limit is no limit: the pod's applies; without pod-level limits, none.
    zero = ctr({}, {"cpu": "0"}, "z")
    assert container_resources(mkpod(None, rl("200m"), [zero]), zero, node).cpu_quota == 20000
    assert container_resources(mkpod(None, None, [zero]), zero, node).cpu_quota == 0


def test_oom_score_adj_spreads_the_unclaimed_pod_memory_request() -> None:
    # KEP-2837's example: pod requests 1Gi of a 4Gi node, one container asks
    # 256Mi, the other nothing; (1Gi - 256Mi) / 2 = 384Mi added to each.
    p = mkpod(rl(memory="1Gi"), None, [ctr(rl(memory="256Mi"), {}), ctr({}, {}, "d")])
    first, second = p["spec"]["containers"]
    assert oom_score_adj(p, first, 4 * GiB) == 1000 - (1000 * 640 * Mi) // (4 * GiB)  # 844
    assert oom_score_adj(p, second, 4 * GiB) == 1000 - (1000 * 384 * Mi) // (4 * GiB)  # 907
    assert oom_score_adj(mkpod(rl("1", "1Gi"), rl("1", "1Gi")), first, 4 * GiB) == -997


def test_a_sidecar_scores_no_higher_than_the_least_asking_regular_container() -> None:
    side = ctr(rl(memory="64Mi"), {}, "side")
    side["restartPolicy"] = "Always"
    p = mkpod(None, None, [ctr(rl(memory="1Gi"), {}), ctr(rl(memory="512Mi"), {}, "d")])
    p["spec"]["initContainers"] = [side]
    # 64Mi alone would give 985; the regular container asking least (512Mi) gives 875.
    assert oom_score_adj(p, side, 4 * GiB) == 875
    # With pod-level requests, each gets (2Gi - 1600Mi) / 3 = 149.33Mi more.
    p["spec"]["resources"] = {"requests": {"memory": "2Gi"}}
    spare = (2 * GiB - 1600 * Mi) // 3
    assert oom_score_adj(p, side, 4 * GiB) == 1000 - (1000 * (512 * Mi + spare)) // (4 * GiB)


# --- resize, unsupported names, static pods --------------------------------


def test_resize_of_a_pod_with_pod_level_resources_is_refused() -> None:
    p = mkpod(rl("1"), None, [ctr(rl("100m"), {})])
    assert resize_allowed(p, p) == POD_LEVEL_MESSAGE
    assert POD_LEVEL_MESSAGE == "pods with pod-level resources cannot be resized"


def test_pod_level_hugepages_are_honoured_not_named() -> None:
    # Set on the pod cgroup as hugetlb limits (tests/unit/cm/test_hugepages.py).
    p = mkpod(rl("1", "1Gi"), {**rl("1", "1Gi"), "hugepages-2Mi": "4Mi"})
    assert unsupported_fields(p) == []


def static(resources: dict[str, Any], containers: list[dict[str, Any]] | None = None) -> Pod:
    cs = containers or [{"name": "c", "image": "busybox:1.36"}]
    spec = {"containers": cs, "resources": resources}
    doc: dict[str, Any] = {"kind": "Pod", "metadata": {"name": "s"}, "spec": spec}
    return apply_defaults(doc, "/m/s.yaml", "file", "n1")


def test_static_pod_pod_level_requests_default_from_limits() -> None:
    p = static({"limits": rl("1", "1Gi")})
    assert p["spec"]["resources"]["requests"] == rl("1", "1Gi")
    assert qos_class(p) == "Guaranteed"
    # ... or from the containers' requests where they set one.
    c = {"name": "c", "image": "busybox:1.36", "resources": {"requests": rl("250m")}}
    p = static({"limits": rl("1", "1Gi")}, [c])
    assert p["spec"]["resources"]["requests"] == {"cpu": "250m", "memory": "1Gi"}
    assert qos_class(p) == "Burstable"


@pytest.mark.parametrize(
    ("resources", "containers", "error"),
    [
        ({"requests": {"ephemeral-storage": "1Gi"}}, None, "Unsupported value"),
        ({"requests": rl("2"), "limits": rl("1")}, None, "less than or equal to cpu limit"),
        ({"limits": {"hugepages-2Mi": "2Mi"}}, None, "HugePages require cpu or memory"),
        ({"requests": rl("100m")}, [ctr(rl("200m"), {})], "aggregate container requests"),
        ({"limits": rl(memory="64Mi")}, [ctr({}, rl(memory="128Mi"))], "pod limits of 64Mi"),
        ({"claims": [{"name": "x"}]}, None, "claims may not be set"),
        ({"requests": {"cpu": "lots"}}, None, "invalid quantity"),
    ],
)
def test_static_pod_pod_level_resources_are_validated(
    resources: dict[str, Any], containers: list[dict[str, Any]] | None, error: str
) -> None:
    cs = [{**c, "image": "busybox:1.36"} for c in containers] if containers else None
    with pytest.raises(ManifestError, match=error):
        static(resources, cs)
