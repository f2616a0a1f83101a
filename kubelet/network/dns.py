"""A pod's DNS settings and hostname (pkg/kubelet/network/dns and
GeneratePodHostNameAndDomain upstream).

The host's resolv.conf (resolvConf) is parsed once and again only when its
inode, size or mtime change, so a pod start costs one stat, not a parse.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubelet.container.runtime import DNSSettings
from kubelet.events import WARNING, Recorder
from kubelet.types import ObjectReference, Pod, PodDNSConfigOption, object_ref
from kubelet.util.validation import DNS1123_SUBDOMAIN_MAX, is_dns1123_label

log = logging.getLogger(__name__)

# Limits of the API's pod validation, applied again to what the host adds.
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
_MAX_RESOLV_CONF = 10 << 20

DEFAULT_DNS_OPTIONS = ("ndots:5",)

_CLUSTER, _HOST, _NONE = "cluster", "host", "none"


@dataclass(frozen=True)
class HostDNS:
    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


def _omit_duplicates(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _append_options(options: Iterable[str], new: Iterable[str]) -> list[str]:
    """Options by name (before the first ':'); a later one replaces an earlier."""
    by_name: dict[str, str] = {}
    for opt in (*options, *new):
        by_name[opt.split(":", 1)[0]] = opt
    return list(by_name.values())


def parse_resolv_conf(text: str) -> tuple[HostDNS, list[str]]:
    """The nameservers, the last search line and the options of a resolv.conf,
    and the problems found (parseResolvConf)."""
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    errors: list[str] = []
    for line in text.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        fields = trimmed.split()
        if not fields:
            continue
        if fields[0] == "nameserver":
            if len(fields) >= 2:
                servers.append(fields[1])
            else:
                errors.append("nameserver list is empty ")
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            options = _append_options(options, fields[1:])
    return HostDNS(tuple(servers), tuple(searches), tuple(options)), errors


def _aggregate(errors: Sequence[str]) -> str:
    # utilerrors.NewAggregate's message
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _pod_dns_type(pod: Pod) -> str:
    spec = pod.get("spec") or {}
    policy = spec.get("dnsPolicy") or ""
    if policy == "None":
        return _NONE
    if policy == "ClusterFirstWithHostNet":
        return _CLUSTER
    if policy == "ClusterFirst":
        return _HOST if spec.get("hostNetwork") else _CLUSTER
    if policy == "Default":
        return _HOST
    log.error(
        "invalid DNSPolicy=%s for pod %s; falling back to ClusterFirst", policy, _pod_desc(pod)
    )
    return _CLUSTER


def _pod_desc(pod: Pod) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('name', '')}_{md.get('namespace', '')}({md.get('uid', '')})"


def _merge_dns_options(
    existing: Iterable[str], pod_options: Iterable[PodDNSConfigOption]
) -> list[str]:
    merged: dict[str, str] = {}
    for op in existing:
        name, _, value = op.partition(":")
        merged[name] = value
    for pod_op in pod_options:
        pod_value = pod_op.get("value")
        merged[str(pod_op.get("name") or "")] = "" if pod_value is None else str(pod_value)
    return [f"{k}:{v}" if v else k for k, v in merged.items()]


class DNSConfigurer:
    """DNS for pods from the kubelet's clusterDNS, clusterDomain and resolvConf."""

    def __init__(
        self,
        cluster_dns: Sequence[str],
        cluster_domain: str,
        resolv_conf: str,
        *,
        node_ips: Sequence[str] = (),
        recorder: Recorder | None = None,
        node_ref: ObjectReference | None = None,
    ) -> None:
        # Re-stringified as upstream's net.IP does (e.g. IPv6 compressed).
        self.cluster_dns = [str(ipaddress.ip_address(ip)) for ip in cluster_dns]
        self.cluster_domain = cluster_domain
        self.resolv_conf = resolv_conf
        self.node_ips = [ipaddress.ip_address(ip) for ip in node_ips]
        self.recorder = recorder
        self.node_ref: ObjectReference = node_ref or {}
        self._host_key: tuple[int, int, int, int] | None = None
        self._host = HostDNS()

    def _warn(self, ref: ObjectReference, reason: str, message: str) -> None:
        if self.recorder is not None and ref:
            self.recorder.event(ref.copy(), WARNING, reason, message)

    def host_dns(self) -> HostDNS:
        """The host's resolv.conf, parsed; ValueError with upstream's message when
        it cannot be read or parsed (the sandbox then cannot be created)."""
        path = self.resolv_conf
        if not path:
            return HostDNS()
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if key == self._host_key:
                    return self._host
                data = f.read(_MAX_RESOLV_CONF + 1)
        except OSError as err:
            # Go's *PathError text, e.g. "open /x: no such file or directory"
            reason = (err.strerror or str(err)).lower()
            raise ValueError(f"open {path}: {reason}") from err
        errors = ["the read limit is reached"] if len(data) > _MAX_RESOLV_CONF else []
        host, parse_errors = parse_resolv_conf(data.decode("utf-8", "replace"))
        errors = errors or parse_errors
        if errors:
            raise ValueError(
                f"Encountered error while parsing resolv conf file. Error: {_aggregate(errors)}"
            )
        self._host_key, self._host = key, host
        return host

    def _cluster_searches(self, host_searches: Sequence[str], namespace: str) -> list[str]:
        if not self.cluster_domain:
            return list(host_searches)
        d = self.cluster_domain
        return _omit_duplicates([f"{namespace}.svc.{d}", f"svc.{d}", d, *host_searches])

    def get_pod_dns(self, pod: Pod) -> DNSSettings:
        """The sandbox's DNS config (GetPodDNS)."""
        host = self.host_dns()
        servers, searches, options = list(host.servers), list(host.searches), list(host.options)
        kind = _pod_dns_type(pod)
        if kind == _NONE:
            servers, searches, options = [], [], []
        elif kind == _CLUSTER and self.cluster_dns:
            servers = list(self.cluster_dns)
            namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
            searches = self._cluster_searches(searches, namespace)
            options = list(DEFAULT_DNS_OPTIONS)
        else:
            if kind == _CLUSTER:
                msg = (
                    "kubelet does not have ClusterDNS IP configured and cannot create Pod using "
                    '"ClusterFirst" policy. Falling back to "Default" policy.'
                )
                self._warn(self.node_ref, "MissingClusterDNS", msg)
                self._warn(object_ref(pod), "MissingClusterDNS", f'pod: "{_pod_desc(pod)}". {msg}')
            if not self.resolv_conf:
                servers += ["::1" if ip.version == 6 else "127.0.0.1" for ip in self.node_ips]
                if not servers:
                    servers.append("127.0.0.1")
                searches = ["."]
        dns_config = (pod.get("spec") or {}).get("dnsConfig")
        if dns_config is not None:
            servers = _omit_duplicates([*servers, *(dns_config.get("nameservers") or [])])
            searches = _omit_duplicates([*searches, *(dns_config.get("searches") or [])])
            options = _merge_dns_options(options, dns_config.get("options") or [])
        servers = self._fit_nameservers(servers, pod)
        searches = self._fit_searches(searches, pod)
        return DNSSettings(servers=servers, searches=searches, options=options)

    def _fit_nameservers(self, servers: list[str], pod: Pod) -> list[str]:
        if len(servers) <= MAX_DNS_NAMESERVERS:
            return servers
        servers = servers[:MAX_DNS_NAMESERVERS]
        self._warn(
            object_ref(pod),
            "DNSConfigForming",
            "Nameserver limits were exceeded, some nameservers have been omitted, "
            f"the applied nameserver line is: {' '.join(servers)}",
        )
        return servers

    def _fit_searches(self, searches: list[str], pod: Pod) -> list[str]:
        exceeded = len(searches) > MAX_DNS_SEARCH_PATHS
        searches = searches[:MAX_DNS_SEARCH_PATHS]
        kept = [s for s in searches if len(s) <= DNS1123_SUBDOMAIN_MAX]
        exceeded |= len(kept) != len(searches)
        line_len = len(" ".join(kept))
        if line_len > MAX_DNS_SEARCH_LIST_CHARS:
            # Drop whole domains from the end until the line fits.
            while kept and line_len > MAX_DNS_SEARCH_LIST_CHARS:
                line_len -= len(kept.pop()) + 1
            exceeded = True
        if exceeded:
            self._warn(
                object_ref(pod),
                "DNSConfigForming",
                "Search Line limits were exceeded, some search paths have been omitted, "
                f"the applied search line is: {' '.join(kept)}",
            )
        return kept

    def check_limits_for_resolv_conf(self) -> None:
        """Warn on the Node when the host's search line leaves no room for the
        cluster's (CheckLimitsForResolvConf; upstream runs it every 30 s)."""
        path = self.resolv_conf
        try:
            searches = self.host_dns().searches
        except ValueError as err:
            self._warn(self.node_ref, "CheckLimitsForResolvConf", str(err))
            return
        limit = MAX_DNS_SEARCH_PATHS - (3 if self.cluster_domain else 0)
        if len(searches) > limit:
            msg = f"Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
        elif any(len(s) > DNS1123_SUBDOMAIN_MAX for s in searches):
            msg = (
                f'Resolv.conf file "{path}" contains a search path which length is more than '
                f"allowed {DNS1123_SUBDOMAIN_MAX} chars!"
            )
        elif len(" ".join(searches)) > MAX_DNS_SEARCH_LIST_CHARS:
            msg = (
                f"Resolv.conf file '{path}' contains search line which length is more than "
                f"allowed {MAX_DNS_SEARCH_LIST_CHARS} chars!"
            )
        else:
            return
        self._warn(self.node_ref, "CheckLimitsForResolvConf", msg)


# --- hostname -----------------------------------------------------------------

HOSTNAME_MAX_LEN = 63
FQDN_MAX_LEN = 64


def _truncate_hostname(pod_name: str, hostname: str) -> str:
    if len(hostname) <= HOSTNAME_MAX_LEN:
        return hostname
    truncated = hostname[:HOSTNAME_MAX_LEN].rstrip("-.")
    log.error("hostname for pod %s was too long, truncated it to %s", pod_name, truncated)
    if not truncated:
        raise ValueError(f'hostname for pod "{pod_name}" was invalid: "{hostname}"')
    return truncated


def generate_pod_hostname_and_domain(pod: Pod, cluster_domain: str) -> tuple[str, str]:
    """The pod's hostname (spec.hostname or its name, cut to 63 characters) and
    its domain `<subdomain>.<namespace>.svc.<clusterDomain>` when spec.subdomain
    is set (GeneratePodHostNameAndDomain); ValueError with upstream's message for
    an invalid hostname or subdomain."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    pod_name = str(md.get("name") or "")
    hostname = pod_name
    if spec.get("hostname"):
        hostname = str(spec["hostname"])
        errs = is_dns1123_label(hostname)
        if errs:
            raise ValueError(
                f'pod Hostname "{hostname}" is not a valid DNS label: {";".join(errs)}'
            )
    hostname = _truncate_hostname(pod_name, hostname)
    domain = ""
    if spec.get("subdomain"):
        sub = str(spec["subdomain"])
        errs = is_dns1123_label(sub)
        if errs:
            raise ValueError(f'pod Subdomain "{sub}" is not a valid DNS label: {";".join(errs)}')
        domain = f"{sub}.{md.get('namespace') or 'default'}.svc.{cluster_domain}"
    return hostname, domain


def kernel_hostname(hostname: str, domain: str, set_hostname_as_fqdn: bool) -> str:
    """The sandbox's hostname: the FQDN with setHostnameAsFQDN and a domain
    (GetNodenameForKernel); ValueError when that exceeds the kernel's 64 chars."""
    if not (domain and set_hostname_as_fqdn):
        return hostname
    fqdn = f"{hostname}.{domain}"
    if len(fqdn) > FQDN_MAX_LEN:
        raise ValueError(
            f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too "
            f"long ({FQDN_MAX_LEN} characters is the max, {len(fqdn)} characters requested)"
        )
    return fqdn
