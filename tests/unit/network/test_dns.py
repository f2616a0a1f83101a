"""Pod DNS per policy, resolv.conf parsing and limits, hostnames: upstream's cases."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kubelet.container.runtime import DNSSettings
from kubelet.network.dns import (
    DNSConfigurer,
    generate_pod_hostname_and_domain,
    kernel_hostname,
    parse_resolv_conf,
)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def event(self, ref: dict[str, Any], etype: str, reason: str, message: str) -> None:
        self.seen.append((ref.get("kind", ""), etype, reason, message))


NODE_REF = {"kind": "Node", "name": "testNode", "uid": "testNode", "apiVersion": "v1"}


@pytest.mark.parametrize(
    ("data", "servers", "searches", "options", "is_err"),
    [
        ("", [], [], [], False),
        (" ", [], [], [], False),
        ("\n", [], [], [], False),
        ("\t\n\t", [], [], [], False),
        ("#comment\n", [], [], [], False),
        (" #comment\n", [], [], [], False),
        ("#comment\n#comment", [], [], [], False),
        ("#comment\nnameserver", [], [], [], True),
        ("#comment\nnameserver\nsearch", [], [], [], True),
        ("#comment\nnameserver 1.2.3.4\nsearch", ["1.2.3.4"], [], [], False),
        ("nameserver 1.2.3.4", ["1.2.3.4"], [], [], False),
        (" nameserver 1.2.3.4", ["1.2.3.4"], [], [], False),
        ("\tnameserver 1.2.3.4", ["1.2.3.4"], [], [], False),
        ("nameserver\t1.2.3.4", ["1.2.3.4"], [], [], False),
        ("nameserver \t 1.2.3.4", ["1.2.3.4"], [], [], False),
        ("nameserver 1.2.3.4\nnameserver 5.6.7.8", ["1.2.3.4", "5.6.7.8"], [], [], False),
        ("nameserver 1.2.3.4 #comment", ["1.2.3.4"], [], [], False),
        ("search ", [], [], [], False),
        ("search .", [], [], [], False),
        ("search . foo", [], ["foo"], [], False),
        ("search foo .", [], ["foo"], [], False),
        ("search foo .  bar", [], ["foo", "bar"], [], False),
        ("search foo", [], ["foo"], [], False),
        ("search foo bar", [], ["foo", "bar"], [], False),
        ("search foo. bar", [], ["foo", "bar"], [], False),
        ("search foo bar bat\n", [], ["foo", "bar", "bat"], [], False),
        ("search foo\nsearch bar", [], ["bar"], [], False),
        ("nameserver 1.2.3.4\nsearch foo bar", ["1.2.3.4"], ["foo", "bar"], [], False),
        ("nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar", ["1.2.3.4", "5.6.7.8"], ["bar"], [], False),
        ("#comment\nnameserver 1.2.3.4\n#comment\nsearch foo\ncomment", ["1.2.3.4"], ["foo"], [], False),
        ("options ", [], [], [], False),
        ("options ndots:5 attempts:2", [], [], ["ndots:5", "attempts:2"], False),
        ("options ndots:1 ndots:5 attempts:2", [], [], ["ndots:5", "attempts:2"], False),
        ("options ndots:1 edns0 attempts:2 single-request-reopen", [], [], ["edns0", "attempts:2", "single-request-reopen", "ndots:1"], False),
        ("options ndots:1\noptions ndots:5 attempts:3", [], [], ["ndots:5", "attempts:3"], False),
        ("options ndots:1 timeout:3 timeout:1 attempts:3\noptions ndots:5", [], [], ["ndots:5", "timeout:1", "attempts:3"], False),
        ("options ndots:1 attempts:3\noptions ndots:1 attempts:3 ndots:5", [], [], ["ndots:5", "attempts:3"], False),
        ("nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4", ["1.2.3.4", "5.6.7.8"], ["bar"], ["ndots:5", "attempts:4"], False),
    ],
)  # fmt: skip
def test_parse_resolv_conf(
    data: str, servers: list[str], searches: list[str], options: list[str], is_err: bool
) -> None:
    host, errors = parse_resolv_conf(data)
    assert bool(errors) == is_err
    if not is_err:
        assert list(host.servers) == servers
        assert list(host.searches) == searches
        assert set(host.options) == set(options)  # upstream's order is a map's


# Distinct paths (pod dnsConfig searches are de-duplicated), 128 + 15 * 127 + 15 spaces.
_2048 = ["a" * 128] + [chr(ord("b") + i) * 127 for i in range(15)]
_LONG8 = [chr(ord("a") + i) * 250 for i in range(8)]


@pytest.mark.parametrize(
    ("searches", "want", "event"),
    [
        (["testNS.svc.TEST", "svc.TEST", "TEST"], ["testNS.svc.TEST", "svc.TEST", "TEST"], False),
        (
            ["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "B" * 256, "BBB"],
            ["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"],
            True,
        ),
        (_2048, _2048, False),
        ([*_2048, "B"], _2048, True),
        ([str(i) for i in range(32)], [str(i) for i in range(32)], False),
        ([str(i) for i in range(33)], [str(i) for i in range(32)], True),
        # Whole domains are cut from the end until the line fits.
        ([*_LONG8, "y" * 10, "z" * 40], [*_LONG8, "y" * 10], True),
    ],
)
def test_search_limits(searches: list[str], want: list[str], event: bool) -> None:
    events = Events()
    conf = DNSConfigurer([], "TEST", "", recorder=events, node_ref=NODE_REF)
    pod = _pod("None", dns_config={"searches": searches})
    assert conf.get_pod_dns(pod).searches == want
    expected = (
        [
            (
                "Pod",
                "Warning",
                "DNSConfigForming",
                "Search Line limits were exceeded, some search paths have been omitted, "
                "the applied search line is: " + " ".join(want),
            )
        ]
        if event
        else []
    )
    assert events.seen == expected


def test_nameserver_limits() -> None:
    events = Events()
    conf = DNSConfigurer([], "TEST", "", recorder=events, node_ref=NODE_REF)
    three = ["127.0.0.1", "10.0.0.10", "8.8.8.8"]
    assert conf.get_pod_dns(_pod("None", dns_config={"nameservers": three})).servers == three
    assert events.seen == []
    four = [*three, "1.2.3.4"]
    assert conf.get_pod_dns(_pod("None", dns_config={"nameservers": four})).servers == three
    assert events.seen == [
        (
            "Pod",
            "Warning",
            "DNSConfigForming",
            "Nameserver limits were exceeded, some nameservers have been omitted, "
            "the applied nameserver line is: 127.0.0.1 10.0.0.10 8.8.8.8",
        )
    ]


def _pod(
    policy: str,
    host_network: bool = False,
    dns_config: dict[str, Any] | None = None,
    namespace: str = "testNS",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"dnsPolicy": policy, "hostNetwork": host_network}
    if dns_config is not None:
        spec["dnsConfig"] = dns_config
    return {"metadata": {"name": "test_pod", "namespace": namespace, "uid": "u1"}, "spec": spec}


HOST_NS, HOST_DOMAIN = "192.0.2.53", "host.example"


@pytest.fixture
def resolv(tmp_path: Path) -> Path:
    p = tmp_path / "resolv.conf"
    p.write_text(f"nameserver {HOST_NS}\nsearch {HOST_DOMAIN}\noptions edns0 timeout:2\n")
    return p


_POD_CONFIG = {
    "nameservers": ["10.0.0.11"],
    "searches": ["my.domain"],
    "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}],
}
_NS_SVC, _SVC, _DOMAIN = "testNS.svc.kubernetes.io", "svc.kubernetes.io", "kubernetes.io"


@pytest.mark.parametrize(
    ("policy", "host_network", "dns_config", "want"),
    [
        ("None", False, None, DNSSettings()),
        ("None", False, {"nameservers": ["203.0.113.1"], "searches": ["my.domain", "second.domain"],
                         "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}]},
         DNSSettings(["203.0.113.1"], ["my.domain", "second.domain"], ["ndots:3", "debug"])),
        ("ClusterFirst", False, None,
         DNSSettings(["10.0.0.10"], [_NS_SVC, _SVC, _DOMAIN, HOST_DOMAIN], ["ndots:5"])),
        ("ClusterFirst", False, _POD_CONFIG,
         DNSSettings(["10.0.0.10", "10.0.0.11"], [_NS_SVC, _SVC, _DOMAIN, HOST_DOMAIN, "my.domain"],
                     ["ndots:3", "debug"])),
        ("ClusterFirstWithHostNet", True, _POD_CONFIG,
         DNSSettings(["10.0.0.10", "10.0.0.11"], [_NS_SVC, _SVC, _DOMAIN, HOST_DOMAIN, "my.domain"],
                     ["ndots:3", "debug"])),
        # ClusterFirst on the host network is Default.
        ("ClusterFirst", True, None, DNSSettings([HOST_NS], [HOST_DOMAIN], ["edns0", "timeout:2"])),
        ("Default", False, _POD_CONFIG,
         DNSSettings([HOST_NS, "10.0.0.11"], [HOST_DOMAIN, "my.domain"],
                     ["edns0", "timeout:2", "ndots:3", "debug"])),
        # An unknown policy is treated as ClusterFirst.
        ("Bogus", True, None,
         DNSSettings(["10.0.0.10"], [_NS_SVC, _SVC, _DOMAIN, HOST_DOMAIN], ["ndots:5"])),
    ],
)  # fmt: skip
def test_get_pod_dns_per_policy(
    resolv: Path, policy: str, host_network: bool, dns_config: Any, want: DNSSettings
) -> None:
    conf = DNSConfigurer(["10.0.0.10"], "kubernetes.io", str(resolv))
    assert conf.get_pod_dns(_pod(policy, host_network, dns_config)) == want


def test_no_resolv_conf_uses_loopback() -> None:
    conf = DNSConfigurer(["203.0.113.1"], "kubernetes.io", "")
    assert conf.get_pod_dns(_pod("Default")) == DNSSettings(["127.0.0.1"], ["."], [])
    assert conf.get_pod_dns(_pod("ClusterFirst", host_network=True)).servers == ["127.0.0.1"]
    got = conf.get_pod_dns(_pod("ClusterFirstWithHostNet", namespace=""))
    assert got == DNSSettings(
        ["203.0.113.1"], ["default.svc.kubernetes.io", _SVC, _DOMAIN], ["ndots:5"]
    )
    v6 = DNSConfigurer([], "", "", node_ips=["fd00::1", "10.0.0.1"])
    assert v6.get_pod_dns(_pod("Default")).servers == ["::1", "127.0.0.1"]


def test_missing_cluster_dns_falls_back_to_default(resolv: Path) -> None:
    events = Events()
    conf = DNSConfigurer([], "kubernetes.io", str(resolv), recorder=events, node_ref=NODE_REF)
    got = conf.get_pod_dns(_pod("ClusterFirst"))
    assert got == DNSSettings([HOST_NS], [HOST_DOMAIN], ["edns0", "timeout:2"])
    msg = (
        'kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" '
        'policy. Falling back to "Default" policy.'
    )
    assert events.seen == [
        ("Node", "Warning", "MissingClusterDNS", msg),
        ("Pod", "Warning", "MissingClusterDNS", f'pod: "test_pod_testNS(u1)". {msg}'),
    ]


def test_cluster_domain_empty_keeps_host_searches(resolv: Path) -> None:
    conf = DNSConfigurer(["10.0.0.10"], "", str(resolv))
    assert conf.get_pod_dns(_pod("ClusterFirst")).searches == [HOST_DOMAIN]


def test_cluster_searches_deduplicated(tmp_path: Path) -> None:
    p = tmp_path / "resolv.conf"
    p.write_text("nameserver 1.1.1.1\nsearch svc.kubernetes.io other\n")
    conf = DNSConfigurer(["10.0.0.10"], "kubernetes.io", str(p))
    assert conf.get_pod_dns(_pod("ClusterFirst")).searches == [_NS_SVC, _SVC, _DOMAIN, "other"]


def test_resolv_conf_read_once_until_it_changes(resolv: Path) -> None:
    conf = DNSConfigurer(["10.0.0.10"], "kubernetes.io", str(resolv))
    first = conf.host_dns()
    assert conf.host_dns() is first
    resolv.write_text("nameserver 192.0.2.99\nsearch changed.example other.example\n")
    st = resolv.stat()
    os.utime(resolv, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert conf.get_pod_dns(_pod("Default")).servers == ["192.0.2.99"]
    assert conf.host_dns().searches == ("changed.example", "other.example")


def test_resolv_conf_errors(tmp_path: Path) -> None:
    missing = DNSConfigurer([], "", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=r"^open .*/nope: no such file or directory$"):
        missing.get_pod_dns(_pod("None"))
    bad = tmp_path / "bad.conf"
    bad.write_text("nameserver\n")
    with pytest.raises(ValueError) as err:
        DNSConfigurer([], "", str(bad)).get_pod_dns(_pod("Default"))
    assert str(err.value) == (
        "Encountered error while parsing resolv conf file. Error: nameserver list is empty "
    )


@pytest.mark.parametrize(
    ("searches", "domain", "message"),
    [
        ([f"d{i}" for i in range(30)], "cluster.local",
         "Resolv.conf file '{path}' contains search line consisting of more than 29 domains!"),
        ([f"d{i}" for i in range(30)], "", None),
        (["x" * 254], "cluster.local",
         'Resolv.conf file "{path}" contains a search path which length is more than allowed 253 chars!'),
        (["x" * 250] * 9, "cluster.local",
         "Resolv.conf file '{path}' contains search line which length is more than allowed 2048 chars!"),
        (["a.example"], "cluster.local", None),
    ],
)  # fmt: skip
def test_check_limits_for_resolv_conf(
    tmp_path: Path, searches: list[str], domain: str, message: str | None
) -> None:
    p = tmp_path / "resolv.conf"
    p.write_text("nameserver 1.1.1.1\nsearch " + " ".join(searches) + "\n")
    events = Events()
    DNSConfigurer(
        [], domain, str(p), recorder=events, node_ref=NODE_REF
    ).check_limits_for_resolv_conf()
    want = (
        []
        if message is None
        else [("Node", "Warning", "CheckLimitsForResolvConf", message.format(path=p))]
    )
    assert events.seen == want


# --- hostname ---------------------------------------------------------------


def _named(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (_named("web-0"), ("web-0", "")),
        (_named("web-0", hostname="myhost"), ("myhost", "")),
        (
            _named("web-0", hostname="myhost", subdomain="sub"),
            ("myhost", "sub.ns.svc.cluster.local"),
        ),
        (_named("web-0", subdomain="sub"), ("web-0", "sub.ns.svc.cluster.local")),
        # 63 characters at most, without a trailing '-' or '.'
        (_named("a" * 62 + "-bcd"), ("a" * 62, "")),
        (_named("a" * 61 + ".-b"), ("a" * 61, "")),
        (_named("a" * 63), ("a" * 63, "")),
    ],
)
def test_generate_pod_hostname_and_domain(pod: dict[str, Any], want: tuple[str, str]) -> None:
    assert generate_pod_hostname_and_domain(pod, "cluster.local") == want


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (_named("p", hostname="My_Host"),
         "pod Hostname \"My_Host\" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
        (_named("p", hostname="a.b"), 'pod Hostname "a.b" is not a valid DNS label: must not contain dots'),
        (_named("p", subdomain="x" * 64),
         f'pod Subdomain "{"x" * 64}" is not a valid DNS label: must be no more than 63 characters'),
        (_named("-" * 70), f'hostname for pod "{"-" * 70}" was invalid: "{"-" * 70}"'),
    ],
)  # fmt: skip
def test_generate_pod_hostname_errors(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        generate_pod_hostname_and_domain(pod, "cluster.local")
    assert str(err.value) == message


def test_kernel_hostname() -> None:
    assert kernel_hostname("web-0", "sub.ns.svc.cluster.local", False) == "web-0"
    assert kernel_hostname("web-0", "", True) == "web-0"
    assert (
        kernel_hostname("web-0", "sub.ns.svc.cluster.local", True)
        == "web-0.sub.ns.svc.cluster.local"
    )
    long_domain = "s.namespace-with-a-long-name.svc.cluster.local"
    with pytest.raises(ValueError) as err:
        kernel_hostname("h" * 20, long_domain, True)
    fqdn = "h" * 20 + "." + long_domain
    assert str(err.value) == (
        f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
        f"(64 characters is the max, {len(fqdn)} characters requested)"
    )
