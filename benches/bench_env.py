"""Building a container's environment (issue 16's target: a few hundred µs).

A container with 50 env entries (plain values, $(VAR) references, fieldRefs,
resourceFieldRefs, configMap and secret keys, an envFrom) in a namespace with
100 services of two ports each, plus the master service. The objects come from
in-memory getters that never suspend, so the coroutine is driven by hand and
the figure is the env code alone, not an event loop.
"""

from __future__ import annotations

import base64
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from kubelet.container.env import EnvContext, make_environment_variables
from kubelet.envvars import ServiceStore

T = TypeVar("T")


class DictGetter:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[f"{namespace}/{name}"]


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("the getters never suspend")


def _service(ns: str, name: str, ip: str) -> dict[str, Any]:
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "metrics", "port": 9090}]
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": ports}}


def _env() -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for i in range(20):
        env.append({"name": f"PLAIN_{i}", "value": f"value-{i}"})
    for i in range(10):
        env.append({"name": f"REF_{i}", "value": f"$(PLAIN_{i})/$(SVC_{i}_SERVICE_HOST):$$(X)"})
    paths = ["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['app']",
             "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.podIP",
             "status.podIPs", "metadata.annotations['team']"]  # fmt: skip
    for i, p in enumerate(paths):
        env.append({"name": f"FIELD_{i}", "valueFrom": {"fieldRef": {"fieldPath": p}}})
    for i, r in enumerate(["limits.cpu", "limits.memory", "requests.cpu", "requests.memory"]):
        ref = {"resource": r, "divisor": "1m" if "cpu" in r else "1Mi"}
        env.append({"name": f"RES_{i}", "valueFrom": {"resourceFieldRef": ref}})
    for i in range(3):
        ref = {"name": "app-config", "key": f"key-{i}"}
        env.append({"name": f"CM_{i}", "valueFrom": {"configMapKeyRef": ref}})
    for i in range(3):
        ref = {"name": "app-secret", "key": f"key-{i}"}
        env.append({"name": f"SECRET_{i}", "valueFrom": {"secretKeyRef": ref}})
    assert len(env) == 50
    return env


@pytest.fixture(scope="module")
def world() -> tuple[dict[str, Any], dict[str, Any], EnvContext]:
    services = ServiceStore()
    services.replace(
        [_service("default", "kubernetes", "10.96.0.1")]
        + [_service("team", f"svc-{i}", f"10.96.{i // 250}.{i % 250 + 2}") for i in range(100)]
    )
    container = {
        "name": "app",
        "env": _env(),
        "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "app-config"}}],
        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    }
    pod = {
        "metadata": {"name": "app-0", "namespace": "team", "uid": "0b6f",
                     "labels": {"app": "app"}, "annotations": {"team": "core"}},
        "spec": {"nodeName": "node-1", "serviceAccountName": "app", "containers": [container]},
    }  # fmt: skip
    data = {f"key-{i}": f"v{i}" for i in range(10)}
    ctx = EnvContext(
        host_ips=["192.168.1.10"],
        pod_ips=["10.244.1.7"],
        node_allocatable={"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi"},
        configmaps=DictGetter({"team/app-config": {"data": data}}),
        secrets=DictGetter(
            {
                "team/app-secret": {
                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
                }
            }
        ),
        services=services,
    )
    return pod, container, ctx


def test_env_50_vars_100_services(benchmark, world) -> None:  # type: ignore[no-untyped-def]
    """Steady state: the namespace's service variables are cached."""
    benchmark.group = "env_build"
    benchmark.extra_info["impl"] = "python"
    pod, container, ctx = world
    envs = benchmark(lambda: _run(make_environment_variables(pod, container, ctx)))
    names = dict(envs)
    assert names["REF_3"] == "value-3/10.96.0.5:$(X)"
    assert names["SVC_99_SERVICE_PORT_METRICS"] == "9090"
    assert names["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert len(envs) == len(names) > 50 + 100 * 12


def test_env_50_vars_100_services_after_service_change(benchmark, world) -> None:  # type: ignore[no-untyped-def]
    """Worst case: a service in the namespace changed, so its variables are rebuilt."""
    benchmark.group = "env_build_cold"
    benchmark.extra_info["impl"] = "python"
    pod, container, ctx = world
    store = ctx.services
    assert isinstance(store, ServiceStore)
    changed = _service("team", "svc-0", "10.96.0.2")

    def one() -> list[tuple[str, str]]:
        store.upsert(changed)
        return _run(make_environment_variables(pod, container, ctx))

    benchmark(one)
