"""What a pod's status shows of in-place resizes (convertContainerStatusResources
in kubelet_pods.go): per resizable container the resources it was allocated
(`allocatedResources`, its requests) and the ones it runs with (`resources`,
read back from the runtime while it runs), and the resize conditions.
"""

from __future__ import annotations

import copy

from kubelet import types as v1
from kubelet.allocation.state import PodResources, Requirements
from kubelet.container.runtime import RUNNING, ContainerResources, PodStatus
from kubelet.core_v1 import ResourceList, ResourceRequirements
from kubelet.util.quantity import BINARY_SI, cpu_millis, format_quantity

# Below these the runtime cannot tell values apart (cm.MinMilliCPULimit and
# cm.MinShares): the allocation is shown when both sides are at or under them.
MIN_MILLI_CPU_LIMIT = 10
MIN_SHARES = 2


def status_resources(
    alloc: Requirements, runtime: PodStatus, name: str, actuated: Requirements | None = None
) -> ResourceRequirements:
    """The allocation, with what the runtime reports for a running container
    in place of its cpu limit, memory limit and cpu request, and the memory
    request last actuated."""
    st = runtime.find(name)
    actual = st.resources if st is not None and st.state == RUNNING else None
    return with_runtime_resources(alloc, actual, actuated)


def with_runtime_resources(
    alloc: Requirements, actual: ContainerResources | None, actuated: Requirements | None = None
) -> ResourceRequirements:
    """`alloc` with what the runtime reports (`actual`) in place wherever the
    runtime can tell the values apart, and the memory request last actuated."""
    out: ResourceRequirements = {}
    limits: ResourceList = dict(alloc.get("limits") or {})
    requests: ResourceList = dict(alloc.get("requests") or {})
    if actual is not None and limits:
        if actual.cpu_limit_m and (
            actual.cpu_limit_m > MIN_MILLI_CPU_LIMIT
            or cpu_millis(limits.get("cpu", 0)) > MIN_MILLI_CPU_LIMIT
        ):
            limits["cpu"] = _milli(actual.cpu_limit_m)
        if actual.memory_limit:
            limits["memory"] = format_quantity(actual.memory_limit, BINARY_SI)
    if actual is not None and requests:
        if actual.cpu_request_m and (
            actual.cpu_request_m > MIN_SHARES or cpu_millis(requests.get("cpu", 0)) > MIN_SHARES
        ):
            requests["cpu"] = _milli(actual.cpu_request_m)
        mem = ((actuated or {}).get("requests") or {}).get("memory")
        if "memory" in requests and mem is not None:
            requests["memory"] = mem
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _milli(m: int) -> str:
    # NewMilliQuantity(m, DecimalSI).String(): "500m", "1", "1500m".
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def apply(
    api: v1.PodStatus,
    alloc: PodResources | None,
    runtime: PodStatus,
    conditions: list[v1.PodCondition],
    actuated: PodResources | None = None,
) -> None:
    """Fill the resize fields of a generated status in place."""
    if alloc:
        for statuses in (api.get("containerStatuses"), api.get("initContainerStatuses")):
            for cs in statuses or []:
                a = alloc.get(cs["name"])
                if a is None:  # not resizable: init containers, ephemeral ones
                    continue
                act = (actuated or {}).get(cs["name"])
                cs["resources"] = status_resources(a, runtime, cs["name"], act)
                if a.get("requests"):
                    cs["allocatedResources"] = dict(a["requests"])  # strings: a copy is deep
    if conditions:
        api["conditions"] = [*(api.get("conditions") or []), *copy.deepcopy(conditions)]
