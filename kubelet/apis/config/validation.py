"""Validation of the effective configuration (ValidateKubeletConfiguration).

Every problem is collected with its field path, so one run of the command
shows all of them.
"""

from __future__ import annotations

import ipaddress

from kubelet.apis.config.types import KubeletConfiguration
from kubelet.features import Feature, FeatureGate, gate_problems
from kubelet.sysctl import SysctlAllowlist
from kubelet.util import cpuset
from kubelet.util.duration import format_duration
from kubelet.util.quantity import parse_quantity
from kubelet.util.tlsconfig import problems as tls_problems

# The project's floor for the relist period; below it the relist cost dominates.
MIN_PLEG_RELIST_PERIOD = 0.05

EVICTION_SIGNALS = frozenset(
    {
        "memory.available",
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "containerfs.available",
        "containerfs.inodesFree",
        "allocatableMemory.available",
        "pid.available",
    }
)
RESERVABLE = frozenset({"cpu", "memory", "ephemeral-storage", "pid"})


class Problems(list[str]):
    """The problems found so far, each with its field path and value."""

    def bad(self, path: str, value: object, why: str) -> None:
        self.append(f"invalid configuration: {path} ({value!r}): {why}")

    def ip(self, path: str, text: str) -> None:
        try:
            ipaddress.ip_address(text)
        except ValueError:
            self.bad(path, text, "must be a valid IP address")


def validate_kubelet_configuration(c: KubeletConfiguration) -> list[str]:
    p = Problems()
    for check in (
        _logs_tls_sysctls,
        _ports_and_counts,
        _durations,
        _image_gc,
        _modes,
        _addresses,
        _eviction,
        _reserved_and_taints,
    ):
        check(c, p)
    if not gate_problems(c.feature_gates):  # bad gates are reported with the flags' ones
        p += _validate_shutdown(c, FeatureGate(c.feature_gates))
    if not c.container_runtime_endpoint:
        p.bad("containerRuntimeEndpoint", c.container_runtime_endpoint, "must not be empty")
    p += validate_resource_managers(c)
    p += _validate_user_namespaces(c)
    return list(p)


_USERNS_UNIT = 65536


def _validate_user_namespaces(c: KubeletConfiguration) -> list[str]:
    """validation_linux.go's idsPerPod checks, with its messages."""
    ids = c.user_namespaces.ids_per_pod
    bad = "invalid configuration: userNamespaces.idsPerPod must "
    if ids is None:
        return []
    if ids < _USERNS_UNIT:
        return [f"{bad}not be less than {_USERNS_UNIT}"]
    if ids % _USERNS_UNIT:
        return [f"{bad}be a multiple of {_USERNS_UNIT}"]
    if ids > 2**32 - 1:
        return [f"{bad}not be more than {2**32 - 1}"]
    return []


def _logs_tls_sysctls(c: KubeletConfiguration, p: Problems) -> None:
    if c.container_log_max_files <= 1:
        p.bad("containerLogMaxFiles", c.container_log_max_files, "must be greater than 1")
    if c.container_log_monitor_interval < 3:
        p.bad(
            "containerLogMonitorInterval",
            c.container_log_monitor_interval,
            "must be a positive time duration greater than or equal to 3s",
        )
    p += [
        f"invalid configuration: {t}" for t in tls_problems(c.tls_min_version, c.tls_cipher_suites)
    ]
    try:
        SysctlAllowlist(c.allowed_unsafe_sysctls)
    except ValueError as err:
        p.bad("allowedUnsafeSysctls", c.allowed_unsafe_sysctls, str(err))


def _ports_and_counts(c: KubeletConfiguration, p: Problems) -> None:
    for path, value, low in (
        ("port", c.port, 1),
        ("healthzPort", c.healthz_port, 0),
        ("readOnlyPort", c.read_only_port, 0),
    ):
        if not low <= value <= 65535:
            p.bad(path, value, f"must be between {low} and 65535, inclusive")
    for path, num in (
        ("eventRecordQPS", c.event_record_qps),
        ("eventBurst", c.event_burst),
        ("kubeAPIQPS", c.kube_api_qps),
        ("kubeAPIBurst", c.kube_api_burst),
        ("registryPullQPS", c.registry_pull_qps),
        ("registryBurst", c.registry_burst),
        ("maxPods", c.max_pods),
        ("podsPerCore", c.pods_per_core),
        ("evictionMaxPodGracePeriod", c.eviction_max_pod_grace_period),
    ):
        if num < 0:
            p.bad(path, num, "must be greater than or equal to 0")
    if c.container_log_max_workers < 1:
        p.bad("containerLogMaxWorkers", c.container_log_max_workers, "must be >= 1")
    if c.node_lease_duration_seconds <= 0:
        p.bad("nodeLeaseDurationSeconds", c.node_lease_duration_seconds, "must be greater than 0")
    if not -1000 <= c.oom_score_adj <= 1000:
        p.bad("oomScoreAdj", c.oom_score_adj, "must be between -1000 and 1000, inclusive")


def _durations(c: KubeletConfiguration, p: Problems) -> None:
    for path, secs, allow_zero in (
        ("syncFrequency", c.sync_frequency, False),
        ("fileCheckFrequency", c.file_check_frequency, False),
        ("httpCheckFrequency", c.http_check_frequency, False),
        ("nodeStatusUpdateFrequency", c.node_status_update_frequency, False),
        ("nodeStatusReportFrequency", c.node_status_report_frequency, False),
        ("runtimeRequestTimeout", c.runtime_request_timeout, False),
        ("imageMinimumGCAge", c.image_minimum_gc_age, True),
        ("imageMaximumGCAge", c.image_maximum_gc_age, True),
        ("streamingConnectionIdleTimeout", c.streaming_connection_idle_timeout, True),
        ("shutdownGracePeriod", c.shutdown_grace_period, True),
        ("shutdownGracePeriodCriticalPods", c.shutdown_grace_period_critical_pods, True),
    ):
        if secs < 0 or (secs == 0 and not allow_zero):
            p.bad(path, secs, "must not be negative" if allow_zero else "must be greater than 0")
    if c.pleg_relist_period < MIN_PLEG_RELIST_PERIOD:
        p.bad("plegRelistPeriod", c.pleg_relist_period, "must be at least 50ms")


def _image_gc(c: KubeletConfiguration, p: Problems) -> None:
    high, low = c.image_gc_high_threshold_percent, c.image_gc_low_threshold_percent
    for path, pct in (("imageGCHighThresholdPercent", high), ("imageGCLowThresholdPercent", low)):
        if not 0 <= pct <= 100:
            p.bad(path, pct, "must be between 0 and 100, inclusive")
    if low >= high:
        p.bad(
            "imageGCLowThresholdPercent",
            low,
            f"must be less than imageGCHighThresholdPercent ({high})",
        )
    if c.image_maximum_gc_age and c.image_maximum_gc_age <= c.image_minimum_gc_age:
        p.bad("imageMaximumGCAge", c.image_maximum_gc_age, "must be greater than imageMinimumGCAge")
    if c.max_parallel_image_pulls is not None:
        if c.max_parallel_image_pulls < 1:
            p.bad("maxParallelImagePulls", c.max_parallel_image_pulls, "must be greater than 0")
        elif c.serialize_image_pulls and c.max_parallel_image_pulls > 1:
            p.bad(
                "maxParallelImagePulls",
                c.max_parallel_image_pulls,
                "must be 1 or unset when serializeImagePulls is true",
            )


def _modes(c: KubeletConfiguration, p: Problems) -> None:
    """The fields that take one of a fixed set of values."""
    if c.memory_swap.swap_behavior not in ("", "NoSwap", "LimitedSwap"):
        p.bad(
            "memorySwap.swapBehavior",
            c.memory_swap.swap_behavior,
            'must be one of: "", "LimitedSwap" or "NoSwap"',
        )
    if c.cgroup_driver not in ("cgroupfs", "systemd"):
        p.bad("cgroupDriver", c.cgroup_driver, 'must be "cgroupfs" or "systemd"')
    p += _validate_enforce_node_allocatable(c)
    if c.system_cgroups and not c.cgroup_root:
        p.bad("systemCgroups", c.system_cgroups, "was specified and cgroupRoot was not specified")
    if c.authorization.mode not in ("AlwaysAllow", "Webhook"):
        p.bad("authorization.mode", c.authorization.mode, 'must be "AlwaysAllow" or "Webhook"')
    if c.logging.format not in ("text", "json"):
        p.bad("logging.format", c.logging.format, 'unsupported log format, want "text" or "json"')
    if c.logging.verbosity < 0:
        p.bad("logging.verbosity", c.logging.verbosity, "must be 0 or greater")
    if c.hairpin_mode not in ("promiscuous-bridge", "hairpin-veth", "none"):
        p.bad("hairpinMode", c.hairpin_mode, "unsupported hairpin mode")


def _addresses(c: KubeletConfiguration, p: Problems) -> None:
    for ip_text in c.cluster_dns:
        p.ip("clusterDNS", ip_text)
    if c.address:
        p.ip("address", c.address)
    if c.healthz_bind_address:
        p.ip("healthzBindAddress", c.healthz_bind_address)


def _eviction(c: KubeletConfiguration, p: Problems) -> None:
    for field_name, thresholds in (
        ("evictionHard", c.eviction_hard),
        ("evictionSoft", c.eviction_soft),
    ):
        for signal, threshold in thresholds.items():
            if signal not in EVICTION_SIGNALS:
                p.bad(f"{field_name}[{signal}]", threshold, "unsupported eviction signal")
                continue
            _check_threshold(f"{field_name}[{signal}]", threshold, p)
    for signal, amount in c.eviction_minimum_reclaim.items():
        path = f"evictionMinimumReclaim[{signal}]"
        if signal not in EVICTION_SIGNALS:
            p.bad(path, amount, "unsupported eviction signal")
        elif amount.strip().endswith("%"):
            share = _percent(amount)
            if share is None or not 0 < share <= 100:
                p.bad(path, amount, "eviction percentage minimum reclaim must be positive")
        else:
            _check_threshold(path, amount, p)
    for signal in c.eviction_soft:
        if signal not in c.eviction_soft_grace_period:
            p.bad(f"evictionSoftGracePeriod[{signal}]", None, "soft threshold needs a grace period")


def _reserved_and_taints(c: KubeletConfiguration, p: Problems) -> None:
    for field_name, reserved in (
        ("kubeReserved", c.kube_reserved),
        ("systemReserved", c.system_reserved),
    ):
        for name, amount in reserved.items():
            path = f"{field_name}[{name}]"
            if name not in RESERVABLE and not name.startswith("hugepages-"):
                p.bad(path, amount, "unsupported resource")
                continue
            try:
                if parse_quantity(amount) < 0:
                    p.bad(path, amount, "must not be negative")
            except ValueError as err:
                p.bad(path, amount, str(err))
    for i, taint in enumerate(c.register_with_taints):
        if not taint.get("key"):
            p.bad(f"registerWithTaints[{i}].key", taint.get("key"), "must not be empty")
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            p.bad(
                f"registerWithTaints[{i}].effect", taint.get("effect"), "unsupported taint effect"
            )


TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def _go_quote_list(items: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{i}"' for i in items) + "]"


def validate_resource_managers(c: KubeletConfiguration) -> list[str]:
    """The CPU, memory and topology manager settings (upstream's messages where it has them)."""
    errs: list[str] = []
    if c.topology_manager_policy not in TOPOLOGY_POLICIES:
        errs.append(
            "invalid configuration: topologyManagerPolicy (--topology-manager-policy) "
            f'"{c.topology_manager_policy}" must be one of: {_go_quote_list(TOPOLOGY_POLICIES)}'
        )
    if c.topology_manager_scope not in ("container", "pod"):
        errs.append(
            "invalid configuration: topologyManagerScope (--topology-manager-scope) "
            f'"{c.topology_manager_scope}" must be one of: "container", or "pod"'
        )
    if c.cpu_manager_policy not in ("none", "static"):
        errs.append(
            f'invalid configuration: cpuManagerPolicy (--cpu-manager-policy) "{c.cpu_manager_policy}"'
            ' must be one of: "none", or "static"'
        )
    if c.memory_manager_policy not in ("None", "Static"):
        errs.append(
            "invalid configuration: memoryManagerPolicy (--memory-manager-policy) "
            f'"{c.memory_manager_policy}" must be one of: "None", or "Static"'
        )
    if c.cpu_manager_reconcile_period <= 0:
        errs.append(
            "invalid configuration: cpuManagerReconcilePeriod (--cpu-manager-reconcile-period) "
            "must be greater than 0"
        )
    if c.reserved_system_cpus:
        if c.system_reserved_cgroup or c.kube_reserved_cgroup:
            errs.append(
                "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with "
                "systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup "
                "(--kube-reserved-cgroup)"
            )
        try:
            cpuset.parse(c.reserved_system_cpus)
        except ValueError as err:
            errs.append(
                "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) "
                f"{c.reserved_system_cpus}, error: {err}"
            )
    errs += _validate_reserved_memory(c.reserved_memory)
    return errs


def _validate_reserved_memory(reservations: list[dict[str, object]]) -> list[str]:
    """validateReservedMemoryConfiguration, plus the shape the Go decoder enforces."""
    errs: list[str] = []
    seen: set[tuple[int, str]] = set()
    for i, r in enumerate(reservations):
        numa = r.get("numaNode", 0) if isinstance(r, dict) else None
        limits = r.get("limits") or {} if isinstance(r, dict) else None
        if not isinstance(numa, int) or isinstance(numa, bool) or not isinstance(limits, dict):
            errs.append(
                f"invalid configuration: reservedMemory[{i}] must be "
                '{"numaNode": <integer>, "limits": {<resource>: <quantity>}}'
            )
            continue
        for name, q in limits.items():
            if name != "memory" and not str(name).startswith("hugepages-"):
                errs.append(
                    f'invalid configuration: the limit type "{name}" for NUMA node {numa} is not '
                    "supported, only [memory hugepages-<HugePageSize>] is accepted"
                )
            try:
                zero = parse_quantity(q) == 0
            except ValueError as err:
                errs.append(f"invalid configuration: reservedMemory[{i}].limits[{name}]: {err}")
                continue
            if zero:
                errs.append(
                    f"invalid configuration: reserved memory may not be zero for NUMA node {numa} "
                    f'and resource "{name}"'
                )
            if (numa, name) in seen:
                errs.append(
                    "invalid configuration: the reserved memory has a duplicate value for NUMA "
                    f'node {numa} and resource "{name}"'
                )
            seen.add((numa, name))
    return errs


_SHUTDOWN_PRIORITY_KEYS = frozenset({"priority", "shutdownGracePeriodSeconds"})


def _validate_shutdown(c: KubeletConfiguration, gates: FeatureGate) -> list[str]:
    """The graceful node shutdown settings, with upstream's messages."""
    errs: list[str] = []
    period, critical = c.shutdown_grace_period, c.shutdown_grace_period_critical_pods
    by_priority = c.shutdown_grace_period_by_pod_priority
    if gates.enabled(Feature.GracefulNodeShutdown):
        if critical > period:
            errs.append(
                f"invalid configuration: shutdownGracePeriodCriticalPods {format_duration(critical)}"
                f" must be <= shutdownGracePeriod {format_duration(period)}"
            )
        for fname, secs in (("shutdownGracePeriod", period),
                            ("shutdownGracePeriodCriticalPods", critical)):  # fmt: skip
            if 0 < secs < 1:  # negative ones are refused above
                errs.append(
                    f"invalid configuration: {fname} {format_duration(secs)} must be either zero "
                    "or otherwise >= 1 sec"
                )
    elif period > 0 or critical > 0:
        errs.append(
            "invalid configuration: specifying shutdownGracePeriod or "
            "shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown"
        )
    if gates.enabled(Feature.GracefulNodeShutdownBasedOnPodPriority):
        if by_priority and (period > 0 or critical > 0):
            errs.append(
                "invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority "
                "and shutdownGracePeriod at the same time"
            )
    elif by_priority:
        errs.append(
            "invalid configuration: Specifying shutdownGracePeriodByPodPriority requires "
            "feature gate GracefulNodeShutdownBasedOnPodPriority"
        )
    for i, entry in enumerate(by_priority):
        # Go's decoder is strict about these fields and their int32 / int64 types.
        path = f"shutdownGracePeriodByPodPriority[{i}]"
        for key in sorted(set(entry) - _SHUTDOWN_PRIORITY_KEYS):
            errs.append(f'invalid configuration: {path}: unknown field "{key}"')
        if not -(2**31) <= entry.get("priority", 0) < 2**31:
            errs.append(f"invalid configuration: {path}.priority: out of the int32 range")
    return errs


_ENFORCE_KEYS = (
    "pods",
    "system-reserved",
    "system-reserved-compressible",
    "kube-reserved",
    "kube-reserved-compressible",
    "none",
)


def _validate_enforce_node_allocatable(c: KubeletConfiguration) -> list[str]:
    """enforceNodeAllocatable as upstream checks it: known keys, once each,
    "none" alone, each reserved key with its cgroup, and cgroupsPerQOS on."""
    errs: list[str] = []
    keys = c.enforce_node_allocatable

    def bad(why: str) -> None:
        errs.append(f"invalid configuration: enforceNodeAllocatable ({keys!r}): {why}")

    for plain in ("system-reserved", "kube-reserved"):
        if plain in keys and f"{plain}-compressible" in keys:
            bad(f'both "{plain}" and "{plain}-compressible" cannot be specified together')
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            bad(f'duplicated enforcement "{key}"')
            continue
        seen.add(key)
        if key not in _ENFORCE_KEYS:
            bad(f'option "{key}" is not one of ' + ", ".join(f'"{k}"' for k in _ENFORCE_KEYS))
            continue
        if key == "none":
            if len(keys) > 1:
                bad('may not contain additional enforcements when "none" is specified')
            continue
        for prefix, cgroup, path in (
            ("system-reserved", c.system_reserved_cgroup, "systemReservedCgroup"),
            ("kube-reserved", c.kube_reserved_cgroup, "kubeReservedCgroup"),
        ):
            if key.startswith(prefix) and not cgroup:
                bad(f'{path} must be specified when "{key}" is included')
        if not c.cgroups_per_qos:
            bad(f'cgroupsPerQOS must be set to true when "{key}" is included')
    return errs


def _percent(text: str) -> float | None:
    try:
        return float(text.strip()[:-1])
    except ValueError:
        return None


def _check_threshold(path: str, value: str, p: Problems) -> None:
    text = str(value).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            p.bad(path, value, "invalid percentage")
            return
        if not 0 <= pct <= 100:
            p.bad(path, value, "percentage must be between 0% and 100%")
        return
    try:
        if parse_quantity(text) < 0:
            p.bad(path, value, "eviction threshold must be positive")
    except ValueError as err:
        p.bad(path, value, str(err))
