"""Kubelet flags (cmd/kubelet/app/options): instance settings, and the flags
that override KubeletConfiguration fields.

Parsing follows pflag, which the Go kubelet uses: `--name=value` or
`--name value`; booleans take `--name` or `--name=false` only (a bare
`--name false` leaves "false" as a positional argument, as in Go).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubelet.apis.config.types import KubeletConfiguration
from kubelet.features import parse_gates
from kubelet.util.duration import parse_duration


@dataclass
class KubeletFlags:
    """Settings of one kubelet instance that are not part of KubeletConfiguration."""

    kubelet_config_file: str = ""
    kubeconfig: str = ""
    bootstrap_kubeconfig: str = ""
    hostname_override: str = ""
    node_ip: str = ""
    root_directory: str = "/var/lib/kubelet"
    cert_directory: str = "/var/lib/kubelet/pki"
    node_labels: dict[str, str] = field(default_factory=dict)
    lock_file_path: str = ""
    exit_on_lock_contention: bool = False
    pod_infra_container_image: str = ""
    image_credential_provider_config: str = ""
    image_credential_provider_bin_dir: str = ""
    run_once: bool = False
    show_help: bool = False
    show_version: bool = False


# --- value parsers (each raises ValueError with a pflag-like message) ---


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("1", "t", "true"):
        return True
    if low in ("0", "f", "false"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{v}": invalid syntax')


def _int(v: str) -> int:
    try:
        return int(v.strip(), 0) if v.strip().lower().startswith(("0x", "0o")) else int(v.strip())
    except ValueError:
        raise ValueError(f'strconv.ParseInt: parsing "{v}": invalid syntax') from None


def _float(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{v}": invalid syntax') from None


def _list(v: str) -> list[str]:
    return [s.strip() for s in v.split(",") if s.strip()]


def _map(sep: str) -> Callable[[str], dict[str, str]]:
    def parse(v: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in _list(v):
            k, s, val = item.partition(sep)
            if not s or not k.strip():
                raise ValueError(f"malformed pair, expect string{sep}string: {item!r}")
            out[k.strip()] = val.strip()
        return out

    return parse


def _taints(v: str) -> list[dict[str, str]]:
    out = []
    for item in _list(v):
        kv, colon, effect = item.rpartition(":")
        if not colon:
            raise ValueError(f"invalid taint spec: {item!r} (want key[=value]:Effect)")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError(f"invalid taint effect: {effect!r}, unsupported taint effect")
        key, _, value = kv.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        out.append(taint)
    return out


@dataclass(frozen=True)
class Flag:
    name: str
    parse: Callable[[str], Any]
    # Where the value goes: ("flags", attr) or ("config", "attr.attr").
    target: tuple[str, str]
    help: str
    is_bool: bool = False
    deprecated: str = ""
    # True: repeated use accumulates (map/multimap flags), as pflag does for these.
    merge: bool = False
    shorthand: str = ""


def _F(name: str, parse: Any, target: tuple[str, str], help: str, **kw: Any) -> Flag:
    return Flag(name, parse, target, help, is_bool=parse is _bool, **kw)


def _header(v: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in _list(v):
        k, s, val = item.partition(":")
        if not s:
            raise ValueError(f"malformed pair, expect string:string: {item!r}")
        out.setdefault(k.strip(), []).append(val.strip())
    return out


FLAGS: list[Flag] = [
    # KubeletFlags
    _F(
        "config",
        str,
        ("flags", "kubelet_config_file"),
        "The Kubelet will load its initial configuration from this file (YAML or JSON, kubelet.config.k8s.io/v1beta1). Command-line flags override it.",
    ),
    _F(
        "kubeconfig",
        str,
        ("flags", "kubeconfig"),
        "Path to a kubeconfig file with how to connect to the API server. Without it the kubelet runs in standalone mode.",
    ),
    _F(
        "bootstrap-kubeconfig",
        str,
        ("flags", "bootstrap_kubeconfig"),
        "Path to a kubeconfig file used to get a client certificate for the kubelet.",
    ),
    _F(
        "hostname-override",
        str,
        ("flags", "hostname_override"),
        "If non-empty, use this string as identification instead of the actual hostname.",
    ),
    _F(
        "node-ip",
        str,
        ("flags", "node_ip"),
        "IP address (or comma-separated dual-stack IP addresses) of the node.",
    ),
    _F(
        "root-dir",
        str,
        ("flags", "root_directory"),
        "Directory path for managing kubelet files (volume mounts, etc).",
    ),
    _F(
        "cert-dir",
        str,
        ("flags", "cert_directory"),
        "The directory where the TLS certs are located; ignored when --tls-cert-file and --tls-private-key-file are given.",
    ),
    _F(
        "node-labels",
        _map("="),
        ("flags", "node_labels"),
        "Labels to add when registering the node in the cluster (key=value pairs separated by ',').",
        merge=True,
    ),
    _F(
        "lock-file",
        str,
        ("flags", "lock_file_path"),
        "The path to file for kubelet to use as a lock file.",
    ),
    _F(
        "exit-on-lock-contention",
        _bool,
        ("flags", "exit_on_lock_contention"),
        "Whether kubelet should exit upon lock-file contention.",
    ),
    _F(
        "pod-infra-container-image",
        str,
        ("flags", "pod_infra_container_image"),
        "Specified image will not be pruned by the image garbage collector. The sandbox image is set by the container runtime's own configuration.",
        deprecated="will be removed in a future release. Image garbage collector will get sandbox image information from CRI.",
    ),
    _F(
        "image-credential-provider-config",
        str,
        ("flags", "image_credential_provider_config"),
        "Path to a credential provider plugin config file (JSON/YAML/YML) or a directory of such files (merged in lexicographical order; duplicate plugin names are an error).",
    ),
    _F(
        "image-credential-provider-bin-dir",
        str,
        ("flags", "image_credential_provider_bin_dir"),
        "The path to the directory where credential provider plugin binaries are located.",
    ),
    _F(
        "runonce",
        _bool,
        ("flags", "run_once"),
        "If true, exit after spawning pods from static pod files or remote urls.",
    ),
    _F(
        "v",
        _int,
        ("config", "logging.verbosity"),
        "number for the log level verbosity",
        shorthand="v",
    ),
    _F("help", _bool, ("flags", "show_help"), "help for kubelet", shorthand="h"),
    _F("version", _bool, ("flags", "show_version"), "Print version information and quit."),
    # KubeletConfiguration overrides
    _F(
        "pod-manifest-path",
        str,
        ("config", "static_pod_path"),
        "Path to the directory containing static pod files to run, or the path to a single static pod file.",
    ),
    _F(
        "manifest-url",
        str,
        ("config", "static_pod_url"),
        "URL for accessing additional Pod specifications to run.",
    ),
    _F(
        "manifest-url-header",
        _header,
        ("config", "static_pod_url_header"),
        "Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url (key:value).",
        merge=True,
    ),
    _F(
        "sync-frequency",
        parse_duration,
        ("config", "sync_frequency"),
        "Max period between synchronizing running containers and config.",
    ),
    _F(
        "file-check-frequency",
        parse_duration,
        ("config", "file_check_frequency"),
        "Duration between checking config files for new data.",
    ),
    _F(
        "http-check-frequency",
        parse_duration,
        ("config", "http_check_frequency"),
        "Duration between checking http for new data.",
    ),
    _F(
        "pleg-relist-period",
        parse_duration,
        ("config", "pleg_relist_period"),
        "Period of the generic PLEG relist (kubelet-py extension; upstream is fixed at 1s; minimum 50ms).",
    ),
    _F(
        "address",
        str,
        ("config", "address"),
        "The IP address for the Kubelet to serve on (0.0.0.0 or :: for all interfaces).",
    ),
    _F("port", _int, ("config", "port"), "The port for the Kubelet to serve on."),
    _F(
        "read-only-port",
        _int,
        ("config", "read_only_port"),
        "The read-only port for the Kubelet to serve on with no authentication/authorization (0 to disable).",
    ),
    _F(
        "healthz-port",
        _int,
        ("config", "healthz_port"),
        "The port of the localhost healthz endpoint (0 to disable).",
    ),
    _F(
        "healthz-bind-address",
        str,
        ("config", "healthz_bind_address"),
        "The IP address for the healthz server to serve on.",
    ),
    _F(
        "tls-cert-file",
        str,
        ("config", "tls_cert_file"),
        "File containing x509 Certificate used for serving HTTPS.",
    ),
    _F(
        "tls-private-key-file",
        str,
        ("config", "tls_private_key_file"),
        "File containing x509 private key matching --tls-cert-file.",
    ),
    _F(
        "tls-min-version",
        str,
        ("config", "tls_min_version"),
        "Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13.",
    ),
    _F(
        "tls-cipher-suites",
        _list,
        ("config", "tls_cipher_suites"),
        "Comma-separated list of cipher suites for the server (Go crypto/tls names). If omitted, the default suites will be used.",
    ),
    _F(
        "rotate-certificates",
        _bool,
        ("config", "rotate_certificates"),
        "Auto rotate the kubelet client certificates by requesting new certificates from the kube-apiserver when the certificate expiration approaches.",
    ),
    _F(
        "anonymous-auth",
        _bool,
        ("config", "authentication.anonymous.enabled"),
        "Enables anonymous requests to the Kubelet server.",
    ),
    _F(
        "authentication-token-webhook",
        _bool,
        ("config", "authentication.webhook.enabled"),
        "Use the TokenReview API to determine authentication for bearer tokens.",
    ),
    _F(
        "client-ca-file",
        str,
        ("config", "authentication.x509.client_ca_file"),
        "If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated.",
    ),
    _F(
        "authentication-token-webhook-cache-ttl",
        parse_duration,
        ("config", "authentication.webhook.cache_ttl"),
        "The duration to cache responses from the webhook token authenticator.",
    ),
    _F(
        "authorization-webhook-cache-authorized-ttl",
        parse_duration,
        ("config", "authorization.webhook.cache_authorized_ttl"),
        "The duration to cache 'authorized' responses from the webhook authorizer.",
    ),
    _F(
        "authorization-webhook-cache-unauthorized-ttl",
        parse_duration,
        ("config", "authorization.webhook.cache_unauthorized_ttl"),
        "The duration to cache 'unauthorized' responses from the webhook authorizer.",
    ),
    _F(
        "authorization-mode",
        str,
        ("config", "authorization.mode"),
        "Authorization mode for Kubelet server: AlwaysAllow or Webhook.",
    ),
    _F(
        "event-qps",
        _float,
        ("config", "event_record_qps"),
        "QPS to limit event creations (0 = unlimited).",
    ),
    _F("event-burst", _int, ("config", "event_burst"), "Maximum size of a bursty event records."),
    _F(
        "kube-api-qps",
        _float,
        ("config", "kube_api_qps"),
        "QPS to use while talking with kubernetes apiserver.",
    ),
    _F(
        "kube-api-burst",
        _int,
        ("config", "kube_api_burst"),
        "Burst to use while talking with kubernetes apiserver.",
    ),
    _F(
        "oom-score-adj",
        _int,
        ("config", "oom_score_adj"),
        "The oom-score-adj value for kubelet process. Values must be within the range [-1000, 1000].",
    ),
    _F("cluster-domain", str, ("config", "cluster_domain"), "Domain for this cluster."),
    _F(
        "cluster-dns",
        _list,
        ("config", "cluster_dns"),
        "Comma-separated list of DNS server IP address.",
    ),
    _F(
        "seccomp-default",
        _bool,
        ("config", "seccomp_default"),
        "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.",
    ),
    _F(
        "allowed-unsafe-sysctls",
        _list,
        ("config", "allowed_unsafe_sysctls"),
        "Comma-separated list of unsafe sysctls or unsafe sysctl patterns (ending in *). Use these at your own risk.",
    ),
    _F(
        "node-status-update-frequency",
        parse_duration,
        ("config", "node_status_update_frequency"),
        "How often the kubelet computes node status.",
    ),
    _F(
        "node-status-max-images",
        _int,
        ("config", "node_status_max_images"),
        "The maximum number of images to report in Node.Status.Images (-1: no cap).",
    ),
    _F("cgroup-root", str, ("config", "cgroup_root"), "Optional root cgroup to use for pods."),
    _F(
        "cgroups-per-qos",
        _bool,
        ("config", "cgroups_per_qos"),
        "Enable creation of QoS cgroup hierarchy.",
    ),
    _F(
        "cgroup-driver",
        str,
        ("config", "cgroup_driver"),
        "Driver that the kubelet uses to manipulate cgroups on the host: cgroupfs or systemd.",
    ),
    _F(
        "runtime-request-timeout",
        parse_duration,
        ("config", "runtime_request_timeout"),
        "Timeout of all runtime requests except long running requests - pull, logs, exec and attach.",
    ),
    _F(
        "container-runtime-endpoint",
        str,
        ("config", "container_runtime_endpoint"),
        "The endpoint of the remote runtime service (unix:///path).",
    ),
    _F(
        "image-service-endpoint",
        str,
        ("config", "image_service_endpoint"),
        "The endpoint of the remote image service; defaults to --container-runtime-endpoint.",
    ),
    _F("max-pods", _int, ("config", "max_pods"), "Number of Pods that can run on this Kubelet."),
    _F(
        "pod-cidr",
        str,
        ("config", "pod_cidr"),
        "The CIDR to use for pod IP addresses, only used in standalone mode.",
    ),
    _F(
        "resolv-conf",
        str,
        ("config", "resolv_conf"),
        "Resolver configuration file used as the basis for the container DNS resolution configuration.",
    ),
    _F(
        "kube-reserved",
        _map("="),
        ("config", "kube_reserved"),
        "Resources reserved for kubernetes system components (e.g. cpu=200m,memory=500Mi).",
        merge=True,
    ),
    _F(
        "system-reserved",
        _map("="),
        ("config", "system_reserved"),
        "Resources reserved for non-kubernetes components (e.g. cpu=200m,memory=500Mi).",
        merge=True,
    ),
    _F(
        "eviction-hard",
        _map("<"),
        ("config", "eviction_hard"),
        "Hard eviction thresholds (e.g. memory.available<1Gi).",
        merge=True,
    ),
    _F(
        "eviction-soft",
        _map("<"),
        ("config", "eviction_soft"),
        "Soft eviction thresholds (e.g. memory.available<1.5Gi).",
        merge=True,
    ),
    _F(
        "fail-swap-on",
        _bool,
        ("config", "fail_swap_on"),
        "Makes the Kubelet fail to start if swap is enabled on the node.",
    ),
    _F(
        "feature-gates",
        parse_gates,
        ("config", "feature_gates"),
        "key=value pairs for alpha/experimental features. Known gates include EventedPLEG.",
        merge=True,
    ),
    _F(
        "register-node", _bool, ("config", "register_node"), "Register the node with the apiserver."
    ),
    _F(
        "register-with-taints",
        _taints,
        ("config", "register_with_taints"),
        "Register the node with the given taints (key=value:Effect, comma separated).",
    ),
    _F(
        "provider-id",
        str,
        ("config", "provider_id"),
        "Unique identifier for identifying the node in a machine database.",
    ),
    _F(
        "logging-format",
        str,
        ("config", "logging.format"),
        'Sets the log format: "text" or "json".',
    ),
    _F("enable-server", _bool, ("config", "enable_server"), "Enable the Kubelet's server."),
    _F(
        "max-open-files",
        _int,
        ("config", "max_open_files"),
        "Number of files that can be opened by Kubelet process.",
    ),
    _F(
        "serialize-image-pulls",
        _bool,
        ("config", "serialize_image_pulls"),
        "Pull images one at a time.",
    ),
    _F(
        "pod-logs-dir",
        str,
        ("config", "pod_logs_dir"),
        "Directory where the container runtime writes pod logs (podLogsDir).",
    ),
]

_BY_NAME = {f.name: f for f in FLAGS}
_BY_SHORT = {f.shorthand: f for f in FLAGS if f.shorthand}


@dataclass
class ParsedArgs:
    # (flag, parsed value) in command-line order.
    values: list[tuple[Flag, Any]]
    positional: list[str]
    problems: list[str]


def parse_args(argv: list[str]) -> ParsedArgs:
    values: list[tuple[Flag, Any]] = []
    positional: list[str] = []
    problems: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional.extend(argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        if arg.startswith("--"):
            name, eq, raw = arg[2:].partition("=")
            flag = _BY_NAME.get(name)
            label = f"--{name}"
        else:
            name, eq, raw = arg[1:].partition("=")
            flag = _BY_SHORT.get(name)
            label = f"-{name}"
        if flag is None:
            problems.append(f"unknown flag: {label}")
            continue
        if not eq:
            if flag.is_bool:
                raw = "true"
            elif i < len(argv):
                raw = argv[i]
                i += 1
            else:
                problems.append(f"flag needs an argument: {label}")
                continue
        try:
            values.append((flag, flag.parse(raw)))
        except ValueError as err:
            problems.append(f'invalid argument "{raw}" for "{label}" flag: {err}')
    return ParsedArgs(values, positional, problems)


def apply_flags(
    parsed: ParsedArgs, flags: KubeletFlags | None, config: KubeletConfiguration | None
) -> None:
    """Apply parsed flag values to the flags and/or the configuration (in order)."""
    seen: set[str] = set()
    for flag, value in parsed.values:
        kind, path = flag.target
        if kind == "flags":
            if flags is not None:
                _assign(flags, path, value, flag.merge and flag.name in seen)
        elif config is not None:
            _assign(config, path, value, flag.merge and flag.name in seen)
        seen.add(flag.name)


def _assign(obj: Any, path: str, value: Any, accumulate: bool) -> None:
    *parents, last = path.split(".")
    for p in parents:
        obj = getattr(obj, p)
    if accumulate and isinstance(value, dict):
        current = dict(getattr(obj, last))
        for k, v in value.items():
            if isinstance(v, list) and isinstance(current.get(k), list):
                current[k] = current[k] + v
            else:
                current[k] = v
        value = current
    setattr(obj, last, value)


def usage() -> str:
    lines = [
        "The kubelet is the primary node agent that runs on each node. It registers the node",
        "with the apiserver, or runs standalone with pods from --pod-manifest-path / --manifest-url.",
        "",
        "Usage:",
        "  kubelet [flags]",
        "",
        "Flags:",
    ]
    for fl in sorted(FLAGS, key=lambda x: x.name):
        head = f"-{fl.shorthand}, --{fl.name}" if fl.shorthand else f"    --{fl.name}"
        text = fl.help
        if fl.deprecated:
            text += f" (DEPRECATED: {fl.deprecated})"
        lines.append(f"  {head}")
        lines.append(f"        {text}")
    return "\n".join(lines) + "\n"


@dataclass
class KubeletServer:
    """Everything needed to run a kubelet: instance flags and shared configuration
    (options.KubeletServer upstream)."""

    flags: KubeletFlags
    config: KubeletConfiguration


__all__ = [
    "FLAGS",
    "KubeletFlags",
    "KubeletServer",
    "ParsedArgs",
    "apply_flags",
    "parse_args",
    "usage",
]
