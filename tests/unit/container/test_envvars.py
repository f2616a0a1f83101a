"""Service environment variables and the service store, as upstream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from kubelet.envvars import ServiceInformer, ServiceStore, from_services, service_env_var_map


def svc(name: str, ip: str, ports: list[dict[str, Any]], namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": ip, "ports": ports, "selector": {"bar": "baz"}},
    }


_UPSTREAM_SERVICES = [
    svc("foo-bar", "1.2.3.4", [{"port": 8080, "protocol": "TCP"}]),
    svc("abc-123", "5.6.7.8", [
        {"name": "u-d-p", "port": 8081, "protocol": "UDP"},
        {"name": "t-c-p", "port": 8081, "protocol": "TCP"},
    ]),
    svc("q-u-u-x", "9.8.7.6", [
        {"port": 8082, "protocol": "TCP"},
        {"name": "8083", "port": 8083, "protocol": "TCP"},
    ]),
    svc("svrc-clusterip-none", "None", [{"port": 8082, "protocol": "TCP"}]),
    svc("svrc-clusterip-empty", "", [{"port": 8082, "protocol": "TCP"}]),
    svc("super-ipv6", "2001:DB8::", [
        {"name": "u-d-p", "port": 8084, "protocol": "UDP"},
        {"name": "t-c-p", "port": 8084, "protocol": "TCP"},
    ]),
    svc("sctp-1", "1.2.3.4", [{"port": 777, "protocol": "SCTP"}]),
]  # fmt: skip

_UPSTREAM_EXPECTED = [
    ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
    ("FOO_BAR_SERVICE_PORT", "8080"),
    ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
    ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
    ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
    ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
    ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
    ("ABC_123_SERVICE_HOST", "5.6.7.8"),
    ("ABC_123_SERVICE_PORT", "8081"),
    ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
    ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
    ("ABC_123_PORT", "udp://5.6.7.8:8081"),
    ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
    ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
    ("ABC_123_PORT_8081_UDP_PORT", "8081"),
    ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
    ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
    ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
    ("ABC_123_PORT_8081_TCP_PORT", "8081"),
    ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
    ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
    ("Q_U_U_X_SERVICE_PORT", "8082"),
    ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
    ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
    ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
    ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
    ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
    ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
    ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
    ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
    ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
    ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
    ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
    ("SUPER_IPV6_SERVICE_PORT", "8084"),
    ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
    ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
    ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
    ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
    ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
    ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
    ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
    ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
    ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
    ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
    ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
    ("SCTP_1_SERVICE_HOST", "1.2.3.4"),
    ("SCTP_1_SERVICE_PORT", "777"),
    ("SCTP_1_PORT", "sctp://1.2.3.4:777"),
    ("SCTP_1_PORT_777_SCTP", "sctp://1.2.3.4:777"),
    ("SCTP_1_PORT_777_SCTP_PROTO", "sctp"),
    ("SCTP_1_PORT_777_SCTP_PORT", "777"),
    ("SCTP_1_PORT_777_SCTP_ADDR", "1.2.3.4"),
]


def test_from_services_matches_upstream_table() -> None:
    assert from_services(_UPSTREAM_SERVICES) == _UPSTREAM_EXPECTED


def test_protocol_defaults_to_tcp() -> None:
    got = dict(from_services([svc("x", "10.0.0.1", [{"port": 80}])]))
    assert got["X_PORT"] == "tcp://10.0.0.1:80"
    assert got["X_PORT_80_TCP_PROTO"] == "tcp"


_MASTER = svc("kubernetes", "10.96.0.1", [{"name": "https", "port": 443}], "default")


def test_service_env_map_master_always() -> None:
    own = [svc("web", "10.0.0.2", [{"port": 80}])]
    with_links = service_env_var_map(own, _MASTER, True)
    assert with_links["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert with_links["KUBERNETES_SERVICE_PORT"] == "443"
    assert with_links["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert with_links["KUBERNETES_PORT"] == "tcp://10.96.0.1:443"
    assert with_links["WEB_SERVICE_HOST"] == "10.0.0.2"
    without = service_env_var_map(own, _MASTER, False)
    assert "WEB_SERVICE_HOST" not in without
    assert without["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert service_env_var_map(own, None, False) == {}


def test_namespace_kubernetes_service_shadows_master_only_with_links() -> None:
    own = [svc("kubernetes", "10.0.0.9", [{"port": 8443}])]
    assert service_env_var_map(own, _MASTER, True)["KUBERNETES_SERVICE_HOST"] == "10.0.0.9"
    assert service_env_var_map(own, _MASTER, False)["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    # A headless one is ignored, so the master's stays.
    headless = [svc("kubernetes", "None", [{"port": 8443}])]
    assert service_env_var_map(headless, _MASTER, True)["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"


def test_store_caches_per_namespace_and_invalidates() -> None:
    store = ServiceStore()
    assert not store.has_synced()
    store.replace([_MASTER, svc("a", "10.0.0.2", [{"port": 80}])])
    assert store.has_synced()
    env = store.service_env("ns", True)
    assert env["A_SERVICE_HOST"] == "10.0.0.2"
    assert store.service_env("ns", True) is env  # cached
    other = store.service_env("other", True)
    assert "A_SERVICE_HOST" not in other and "KUBERNETES_SERVICE_HOST" in other

    store.upsert(svc("b", "10.0.0.3", [{"port": 81}]))
    env2 = store.service_env("ns", True)
    assert env2["B_SERVICE_PORT"] == "81"
    assert store.service_env("other", True) is other  # another namespace untouched

    store.delete(svc("a", "", []))
    assert "A_SERVICE_HOST" not in store.service_env("ns", True)
    assert [s["metadata"]["name"] for s in store.services("ns")] == ["b"]

    # The master service is in every namespace's map.
    store.upsert(svc("kubernetes", "10.96.0.2", [{"port": 443}], "default"))
    assert store.service_env("other", True)["KUBERNETES_SERVICE_HOST"] == "10.96.0.2"
    store.delete(svc("kubernetes", "", [], "default"))
    assert "KUBERNETES_SERVICE_HOST" not in store.service_env("other", False)


class _Client:
    def __init__(self, items: list[dict[str, Any]], events: list[tuple[str, dict[str, Any]]]):
        self.items, self.events = items, events
        self.paths: list[str] = []

    async def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        self.paths.append(path)
        return {"metadata": {"resourceVersion": "1"}, "items": self.items}

    async def watch(
        self, path: str, params: dict[str, str]
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        for e in self.events:
            yield e
        self.events = []
        await asyncio.sleep(3600)


async def test_informer_lists_and_watches_all_services() -> None:
    client = _Client(
        [_MASTER, svc("a", "10.0.0.2", [{"port": 80}])],
        [("ADDED", svc("b", "10.0.0.3", [{"port": 81}])), ("DELETED", svc("a", "", []))],
    )
    inf = ServiceInformer(client)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(inf.run(stop))
    for _ in range(100):
        if "B_SERVICE_HOST" in inf.service_env("ns", True):
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    env = inf.service_env("ns", True)
    assert env["B_SERVICE_HOST"] == "10.0.0.3" and "A_SERVICE_HOST" not in env
    assert client.paths == ["/api/v1/services"]
