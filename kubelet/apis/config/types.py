"""The KubeletConfiguration object, with the v1beta1 defaults.

Python attributes are snake_case; each field carries its JSON name (the
upstream camelCase spelling) in its metadata. Durations are float seconds in
Python and Go duration strings on the wire ("1m0s").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"


def f(json: str, default: Any = None, *, kind: str = "", factory: Any = None) -> Any:
    """A field with its JSON name; kind="duration" marks Go duration strings."""
    meta = {"json": json, "kind": kind}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class KubeletAnonymousAuthentication:
    enabled: bool = f("enabled", False)


@dataclass
class KubeletWebhookAuthentication:
    enabled: bool = f("enabled", True)
    cache_ttl: float = f("cacheTTL", 120.0, kind="duration")


@dataclass
class KubeletX509Authentication:
    client_ca_file: str = f("clientCAFile", "")


@dataclass
class KubeletAuthentication:
    x509: KubeletX509Authentication = f("x509", factory=KubeletX509Authentication)
    webhook: KubeletWebhookAuthentication = f("webhook", factory=KubeletWebhookAuthentication)
    anonymous: KubeletAnonymousAuthentication = f(
        "anonymous", factory=KubeletAnonymousAuthentication
    )


@dataclass
class KubeletWebhookAuthorization:
    cache_authorized_ttl: float = f("cacheAuthorizedTTL", 300.0, kind="duration")
    cache_unauthorized_ttl: float = f("cacheUnauthorizedTTL", 30.0, kind="duration")


@dataclass
class KubeletAuthorization:
    mode: str = f("mode", "Webhook")
    webhook: KubeletWebhookAuthorization = f("webhook", factory=KubeletWebhookAuthorization)


@dataclass
class LoggingConfiguration:
    format: str = f("format", "text")
    # Go accepts a duration string or an integer of nanoseconds here.
    flush_frequency: float = f("flushFrequency", 5.0, kind="duration_or_ns")
    verbosity: int = f("verbosity", 0)
    vmodule: list[Any] = f("vmodule", factory=list)
    options: dict[str, Any] = f("options", factory=dict)


@dataclass
class MemorySwapConfiguration:
    # "" (NoSwap), "NoSwap" or "LimitedSwap" (kubelet.kuberuntime.swap).
    swap_behavior: str = f("swapBehavior", "")


@dataclass
class UserNamespaces:
    # Host IDs each hostUsers: false pod gets (None or 0: 65536; kubelet/userns).
    ids_per_pod: int | None = f("idsPerPod", None)


def _default_eviction_hard() -> dict[str, str]:
    return {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    }


@dataclass
class KubeletConfiguration:
    """Shared (cluster-wide) kubelet settings; instance settings are in KubeletFlags."""

    enable_server: bool = f("enableServer", True)
    static_pod_path: str = f("staticPodPath", "")
    pod_logs_dir: str = f("podLogsDir", "/var/log/pods")
    sync_frequency: float = f("syncFrequency", 60.0, kind="duration")
    file_check_frequency: float = f("fileCheckFrequency", 20.0, kind="duration")
    http_check_frequency: float = f("httpCheckFrequency", 20.0, kind="duration")
    static_pod_url: str = f("staticPodURL", "")
    static_pod_url_header: dict[str, list[str]] = f("staticPodURLHeader", factory=dict)
    address: str = f("address", "0.0.0.0")
    port: int = f("port", 10250)
    read_only_port: int = f("readOnlyPort", 0)
    tls_cert_file: str = f("tlsCertFile", "")
    tls_private_key_file: str = f("tlsPrivateKeyFile", "")
    tls_cipher_suites: list[str] = f("tlsCipherSuites", factory=list)
    tls_min_version: str = f("tlsMinVersion", "")
    rotate_certificates: bool = f("rotateCertificates", False)
    server_tls_bootstrap: bool = f("serverTLSBootstrap", False)
    authentication: KubeletAuthentication = f("authentication", factory=KubeletAuthentication)
    authorization: KubeletAuthorization = f("authorization", factory=KubeletAuthorization)
    registry_pull_qps: int = f("registryPullQPS", 5)
    registry_burst: int = f("registryBurst", 10)
    event_record_qps: int = f("eventRecordQPS", 50)
    event_burst: int = f("eventBurst", 100)
    enable_debugging_handlers: bool = f("enableDebuggingHandlers", True)
    enable_system_log_handler: bool = f("enableSystemLogHandler", True)
    enable_profiling_handler: bool = f("enableProfilingHandler", True)
    enable_debug_flags_handler: bool = f("enableDebugFlagsHandler", True)
    healthz_port: int = f("healthzPort", 10248)
    healthz_bind_address: str = f("healthzBindAddress", "127.0.0.1")
    oom_score_adj: int = f("oomScoreAdj", -999)
    cluster_domain: str = f("clusterDomain", "")
    cluster_dns: list[str] = f("clusterDNS", factory=list)
    allowed_unsafe_sysctls: list[str] = f("allowedUnsafeSysctls", factory=list)
    seccomp_default: bool = f("seccompDefault", False)
    streaming_connection_idle_timeout: float = f(
        "streamingConnectionIdleTimeout", 4 * 3600.0, kind="duration"
    )
    node_status_update_frequency: float = f("nodeStatusUpdateFrequency", 10.0, kind="duration")
    node_status_report_frequency: float = f("nodeStatusReportFrequency", 300.0, kind="duration")
    node_lease_duration_seconds: int = f("nodeLeaseDurationSeconds", 40)
    image_minimum_gc_age: float = f("imageMinimumGCAge", 120.0, kind="duration")
    image_maximum_gc_age: float = f("imageMaximumGCAge", 0.0, kind="duration")
    image_gc_high_threshold_percent: int = f("imageGCHighThresholdPercent", 85)
    image_gc_low_threshold_percent: int = f("imageGCLowThresholdPercent", 80)
    volume_stats_agg_period: float = f("volumeStatsAggPeriod", 60.0, kind="duration")
    kubelet_cgroups: str = f("kubeletCgroups", "")
    system_cgroups: str = f("systemCgroups", "")
    cgroup_root: str = f("cgroupRoot", "")
    cgroups_per_qos: bool = f("cgroupsPerQOS", True)
    cgroup_driver: str = f("cgroupDriver", "cgroupfs")
    runtime_request_timeout: float = f("runtimeRequestTimeout", 120.0, kind="duration")
    hairpin_mode: str = f("hairpinMode", "promiscuous-bridge")
    max_pods: int = f("maxPods", 110)
    pod_cidr: str = f("podCIDR", "")
    pod_pids_limit: int = f("podPidsLimit", -1)
    run_once: bool = f("runOnce", False)
    resolv_conf: str = f("resolvConf", "/etc/resolv.conf")
    cpu_manager_policy: str = f("cpuManagerPolicy", "none")
    cpu_manager_policy_options: dict[str, str] = f("cpuManagerPolicyOptions", factory=dict)
    cpu_manager_reconcile_period: float = f("cpuManagerReconcilePeriod", 10.0, kind="duration")
    memory_manager_policy: str = f("memoryManagerPolicy", "None")
    topology_manager_policy: str = f("topologyManagerPolicy", "none")
    topology_manager_scope: str = f("topologyManagerScope", "container")
    topology_manager_policy_options: dict[str, str] = f(
        "topologyManagerPolicyOptions", factory=dict
    )
    # [{"numaNode": 0, "limits": {"memory": "1Gi"}}] (MemoryReservation upstream)
    reserved_memory: list[dict[str, Any]] = f("reservedMemory", factory=list)
    cpu_cfs_quota: bool = f("cpuCFSQuota", True)
    cpu_cfs_quota_period: float = f("cpuCFSQuotaPeriod", 0.1, kind="duration")
    node_status_max_images: int = f("nodeStatusMaxImages", 50)
    max_open_files: int = f("maxOpenFiles", 1000000)
    content_type: str = f("contentType", "application/vnd.kubernetes.protobuf")
    kube_api_qps: int = f("kubeAPIQPS", 50)
    kube_api_burst: int = f("kubeAPIBurst", 100)
    serialize_image_pulls: bool = f("serializeImagePulls", True)
    max_parallel_image_pulls: int | None = f("maxParallelImagePulls", None)
    user_namespaces: UserNamespaces = f("userNamespaces", factory=UserNamespaces)
    eviction_hard: dict[str, str] = f("evictionHard", factory=_default_eviction_hard)
    eviction_soft: dict[str, str] = f("evictionSoft", factory=dict)
    eviction_soft_grace_period: dict[str, str] = f("evictionSoftGracePeriod", factory=dict)
    eviction_pressure_transition_period: float = f(
        "evictionPressureTransitionPeriod", 300.0, kind="duration"
    )
    eviction_max_pod_grace_period: int = f("evictionMaxPodGracePeriod", 0)
    eviction_minimum_reclaim: dict[str, str] = f("evictionMinimumReclaim", factory=dict)
    merge_default_eviction_settings: bool = f("mergeDefaultEvictionSettings", False)
    kernel_memcg_notification: bool = f("kernelMemcgNotification", False)
    pods_per_core: int = f("podsPerCore", 0)
    enable_controller_attach_detach: bool = f("enableControllerAttachDetach", True)
    protect_kernel_defaults: bool = f("protectKernelDefaults", False)
    make_iptables_util_chains: bool = f("makeIPTablesUtilChains", True)
    feature_gates: dict[str, bool] = f("featureGates", factory=dict)
    fail_swap_on: bool = f("failSwapOn", True)
    memory_swap: MemorySwapConfiguration = f("memorySwap", factory=MemorySwapConfiguration)
    container_log_max_size: str = f("containerLogMaxSize", "10Mi")
    container_log_max_files: int = f("containerLogMaxFiles", 5)
    container_log_max_workers: int = f("containerLogMaxWorkers", 1)
    container_log_monitor_interval: float = f("containerLogMonitorInterval", 10.0, kind="duration")
    system_reserved: dict[str, str] = f("systemReserved", factory=dict)
    reserved_system_cpus: str = f("reservedSystemCPUs", "")
    kube_reserved: dict[str, str] = f("kubeReserved", factory=dict)
    system_reserved_cgroup: str = f("systemReservedCgroup", "")
    kube_reserved_cgroup: str = f("kubeReservedCgroup", "")
    enforce_node_allocatable: list[str] = f("enforceNodeAllocatable", factory=lambda: ["pods"])
    provider_id: str = f("providerID", "")
    logging: LoggingConfiguration = f("logging", factory=LoggingConfiguration)
    shutdown_grace_period: float = f("shutdownGracePeriod", 0.0, kind="duration")
    shutdown_grace_period_critical_pods: float = f(
        "shutdownGracePeriodCriticalPods", 0.0, kind="duration"
    )
    # [{priority: int32, shutdownGracePeriodSeconds: int64}, ...]
    shutdown_grace_period_by_pod_priority: list[dict[str, int]] = f(
        "shutdownGracePeriodByPodPriority", factory=list
    )
    register_with_taints: list[dict[str, str]] = f("registerWithTaints", factory=list)
    register_node: bool = f("registerNode", True)
    local_storage_capacity_isolation: bool = f("localStorageCapacityIsolation", True)
    container_runtime_endpoint: str = f(
        "containerRuntimeEndpoint", "unix:///run/containerd/containerd.sock"
    )
    image_service_endpoint: str = f("imageServiceEndpoint", "")
    # Project extension: the generic PLEG's relist period (upstream hard-codes 1s).
    pleg_relist_period: float = f("plegRelistPeriod", 1.0, kind="duration")


def json_name(fld: dataclasses.Field[Any]) -> str:
    return str(fld.metadata.get("json", fld.name))
