"""make_environment_variables against upstream's rules, with dict-backed fakes."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kubelet.container.env import EnvContext, make_environment_variables
from kubelet.container.runtime import ContainerConfigError
from kubelet.envvars import ServiceStore
from kubelet.objectcache import ObjectNotFoundError


class FakeGetter:
    """ObjectGetter over a dict; counts gets to show one fetch per object per call."""

    def __init__(self, kind: str, objects: dict[str, dict[str, Any]]) -> None:
        self.kind, self.objects = kind, objects
        self.gets: list[str] = []
        self.fail: Exception | None = None

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets.append(f"{namespace}/{name}")
        if self.fail is not None:
            raise self.fail
        key = f"{namespace}/{name}"
        if key not in self.objects:
            raise ObjectNotFoundError(self.kind, namespace, name)
        return self.objects[key]


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def cm(**data: str) -> dict[str, Any]:
    return {"data": data}


def secret(**data: str) -> dict[str, Any]:
    return {"data": {k: b64(v) for k, v in data.items()}}


def pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "labels": {"app": "x"},
                     "annotations": {"a": "b"}},
        "spec": {"containers": [container], "nodeName": "node-1",
                 "serviceAccountName": "default", **spec},
    }  # fmt: skip


def ctx(**kw: Any) -> EnvContext:
    base: dict[str, Any] = {
        "host_ips": ["192.168.1.10"],
        "pod_ips": ["10.244.0.5"],
        "node_allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi"},
        "configmaps": FakeGetter("configmap", {}),
        "secrets": FakeGetter("secret", {}),
    }
    base.update(kw)
    return EnvContext(**base)


async def build(
    container: dict[str, Any], c: EnvContext | None = None, **spec: Any
) -> dict[str, str]:
    got = await make_environment_variables(pod(container, **spec), container, c or ctx())
    names = [k for k, _ in got]
    assert len(names) == len(set(names)), "each name once"
    return dict(got)


async def build_error(container: dict[str, Any], c: EnvContext | None = None) -> str:
    with pytest.raises(ContainerConfigError) as err:
        await make_environment_variables(pod(container), container, c or ctx())
    return str(err.value)


# --- values and expansion -------------------------------------------------


async def test_values_expand_against_earlier_vars_only() -> None:
    env = [
        {"name": "FOO", "value": "foo-value"},
        {"name": "BAR", "value": "bar-value"},
        {"name": "FOOBAR", "value": "$(FOO);;$(BAR)"},
        {"name": "LATER_REF", "value": "$(LATER)"},
        {"name": "LATER", "value": "x"},
        {"name": "ESCAPED", "value": "$$(FOO)"},
        {"name": "UNCLOSED", "value": "$(FOO"},
        {"name": "EMPTY", "value": ""},
    ]
    got = await build({"name": "c", "env": env})
    assert got == {
        "FOO": "foo-value",
        "BAR": "bar-value",
        "FOOBAR": "foo-value;;bar-value",
        "LATER_REF": "$(LATER)",
        "LATER": "x",
        "ESCAPED": "$(FOO)",
        "UNCLOSED": "$(FOO",
        "EMPTY": "",
    }


async def test_value_wins_over_value_from_and_is_expanded() -> None:
    env = [
        {"name": "A", "value": "a"},
        {"name": "B", "value": "$(A)b", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    assert (await build({"name": "c", "env": env}))["B"] == "ab"


# --- envFrom --------------------------------------------------------------


async def test_env_from_prefixes_and_keys_kept_as_is() -> None:
    cms = FakeGetter("configmap", {"ns/cfg": cm(**{"data-1": "value-1", "data-2": "value-2"})})
    sec = FakeGetter("secret", {"ns/sec": secret(**{"data-1": "s1", "1bad key": "s2"})})
    container = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "cfg"}},
            {"prefix": "1-", "configMapRef": {"name": "cfg"}},
            {"prefix": "$_-", "configMapRef": {"name": "cfg"}},
            {"prefix": "#@!", "configMapRef": {"name": "cfg"}},
            {"prefix": "S_", "secretRef": {"name": "sec"}},
        ],
    }
    got = await build(container, ctx(configmaps=cms, secrets=sec))
    assert got == {
        "data-1": "value-1", "data-2": "value-2",
        "1-data-1": "value-1", "1-data-2": "value-2",
        "$_-data-1": "value-1", "$_-data-2": "value-2",
        "#@!data-1": "value-1", "#@!data-2": "value-2",
        "S_data-1": "s1", "S_1bad key": "s2",
    }  # fmt: skip
    assert cms.gets == ["ns/cfg"]  # one fetch per object and call


async def test_later_sources_and_env_override_earlier() -> None:
    cms = FakeGetter("configmap", {"ns/a": cm(X="from-a", Y="a"), "ns/b": cm(X="from-b")})
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}],
        "env": [{"name": "Y", "value": "env-$(X)"}],
    }
    got = await make_environment_variables(pod(container), container, ctx(configmaps=cms))
    assert got == [("X", "from-b"), ("Y", "env-from-b")]


async def test_env_from_missing() -> None:
    container = {"name": "c", "envFrom": [{"configMapRef": {"name": "nope"}}]}
    assert await build_error(container) == 'configmap "nope" not found'
    container = {"name": "c", "envFrom": [{"secretRef": {"name": "nope"}}]}
    assert await build_error(container) == 'secret "nope" not found'
    container = {
        "name": "c",
        "envFrom": [
            {"configMapRef": {"name": "nope", "optional": True}},
            {"secretRef": {"name": "nope", "optional": True}},
        ],
    }
    assert await build(container) == {}


async def test_no_client() -> None:
    no_client = ctx(configmaps=None, secrets=None)
    for container, message in [
        ({"name": "c", "envFrom": [{"configMapRef": {"name": "x"}}]},
         "couldn't get configMap ns/x, no kubeClient defined"),
        ({"name": "c", "envFrom": [{"secretRef": {"name": "x", "optional": True}}]},
         "couldn't get secret ns/x, no kubeClient defined"),
        ({"name": "c", "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k", "optional": True}}}]},
         "couldn't get configMap ns/x, no kubeClient defined"),
        ({"name": "c", "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]},
         "couldn't get secret ns/x, no kubeClient defined"),
    ]:  # fmt: skip
        assert await build_error(container, no_client) == message


# --- configMapKeyRef / secretKeyRef ----------------------------------------


def key_ref(kind: str, name: str, key: str, optional: bool | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if optional is not None:
        ref["optional"] = optional
    return {"valueFrom": {kind: ref}}


async def test_key_refs_resolve() -> None:
    cms = FakeGetter("configmap", {"ns/cfg": cm(data="config-value")})
    sec = FakeGetter("secret", {"ns/sec": secret(pw="s3cr3t\n")})
    env = [
        {"name": "C", **key_ref("configMapKeyRef", "cfg", "data")},
        {"name": "S", **key_ref("secretKeyRef", "sec", "pw")},
        {"name": "BOTH", "value": "$(C)/$(S)"},
    ]
    got = await build({"name": "c", "env": env}, ctx(configmaps=cms, secrets=sec))
    assert got == {"C": "config-value", "S": "s3cr3t\n", "BOTH": "config-value/s3cr3t\n"}


@pytest.mark.parametrize(
    ("kind", "objects", "name", "key", "message"),
    [
        ("configMapKeyRef", {"ns/cfg": cm(a="1")}, "cfg", "b", "couldn't find key b in ConfigMap ns/cfg"),
        ("configMapKeyRef", {}, "cfg", "a", 'configmap "cfg" not found'),
        ("secretKeyRef", {"ns/sec": secret(a="1")}, "sec", "b", "couldn't find key b in Secret ns/sec"),
        ("secretKeyRef", {}, "sec", "a", 'secret "sec" not found'),
    ],
)  # fmt: skip
async def test_key_refs_missing(
    kind: str, objects: dict[str, Any], name: str, key: str, message: str
) -> None:
    getter_kind = "configmap" if kind == "configMapKeyRef" else "secret"
    getters = {
        "configmaps" if getter_kind == "configmap" else "secrets": FakeGetter(getter_kind, objects)
    }
    container = {"name": "c", "env": [{"name": "V", **key_ref(kind, name, key)}]}
    assert await build_error(container, ctx(**getters)) == message
    container = {"name": "c", "env": [{"name": "V", **key_ref(kind, name, key, optional=False)}]}
    assert await build_error(container, ctx(**getters)) == message
    # Optional: the variable is left out, or keeps what envFrom gave it.
    container = {"name": "c", "env": [{"name": "V", **key_ref(kind, name, key, optional=True)}]}
    assert await build(container, ctx(**getters)) == {}
    getters_with_base = dict(getters)
    base = FakeGetter("configmap", {"ns/base": cm(V="from-env-from")})
    if getter_kind == "configmap":
        base.objects.update(objects)
    getters_with_base["configmaps"] = base
    container["envFrom"] = [{"configMapRef": {"name": "base"}}]
    assert await build(container, ctx(**getters_with_base)) == {"V": "from-env-from"}


async def test_getter_failure_message_passes_through() -> None:
    cms = FakeGetter("configmap", {})
    cms.fail = TimeoutError("failed to sync configmap cache: timed out waiting for the condition")
    container = {"name": "c", "env": [{"name": "V", **key_ref("configMapKeyRef", "x", "k", True)}]}
    # Only not-found is forgiven for optional references.
    assert await build_error(container, ctx(configmaps=cms)) == (
        "failed to sync configmap cache: timed out waiting for the condition"
    )


# --- fieldRef ---------------------------------------------------------------


def field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


async def test_field_refs() -> None:
    env = [
        {"name": "POD_NAME", **field("metadata.name")},
        {"name": "POD_NAMESPACE", **field("metadata.namespace")},
        {"name": "POD_UID", **field("metadata.uid")},
        {"name": "LABELS", **field("metadata.labels")},
        {"name": "APP", **field("metadata.labels['app']")},
        {"name": "ANN", **field("metadata.annotations['a']")},
        {"name": "NODE", **field("spec.nodeName")},
        {"name": "SA", **field("spec.serviceAccountName")},
        {"name": "HOST_IP", **field("status.hostIP")},
        {"name": "HOST_IPS", **field("status.hostIPs")},
        {"name": "POD_IP", **field("status.podIP")},
        {"name": "POD_IPS", **field("status.podIPs")},
    ]
    c = ctx(host_ips=["192.168.1.10", "fd00::10"], pod_ips=["fd01::5", "10.244.0.5"])
    got = await build({"name": "c", "env": env}, c)
    assert got == {
        "POD_NAME": "p", "POD_NAMESPACE": "ns", "POD_UID": "uid-1",
        "LABELS": 'app="x"', "APP": "x", "ANN": "b", "NODE": "node-1", "SA": "default",
        "HOST_IP": "192.168.1.10", "HOST_IPS": "192.168.1.10,fd00::10",
        # IPv4 first without a configured IPv6 node IP.
        "POD_IP": "10.244.0.5", "POD_IPS": "10.244.0.5,fd01::5",
    }  # fmt: skip
    v6_first = ctx(pod_ips=["10.244.0.5", "fd01::5"], node_ips=["fd00::10"])
    assert (await build({"name": "c", "env": env[10:]}, v6_first)) == {
        "POD_IP": "fd01::5",
        "POD_IPS": "fd01::5,10.244.0.5",
    }


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"fieldPath": "spec.restartPolicy"}, "unsupported fieldPath: spec.restartPolicy"),
        ({"fieldPath": "metadata.bogus"}, "field label not supported: metadata.bogus"),
        ({"apiVersion": "v2", "fieldPath": "metadata.name"}, "unsupported pod version: v2"),
    ],
)
async def test_field_ref_errors(ref: dict[str, str], message: str) -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"fieldRef": ref}}]}
    assert await build_error(container) == message


async def test_host_ip_unknown() -> None:
    container = {"name": "c", "env": [{"name": "X", **field("status.hostIP")}]}
    assert await build_error(container, ctx(host_ips=[])) == "host IP unknown; known addresses: []"


# --- resourceFieldRef -------------------------------------------------------


def res(resource: str, divisor: str | None = None, container: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource}
    if divisor:
        ref["divisor"] = divisor
    if container:
        ref["containerName"] = container
    return {"valueFrom": {"resourceFieldRef": ref}}


async def test_resource_refs_with_defaults() -> None:
    env = [
        {"name": "CPU_LIMIT", **res("limits.cpu")},
        {"name": "MEMORY_LIMIT", **res("limits.memory")},
        {"name": "CPU_REQUEST", **res("requests.cpu", "1m")},
        {"name": "MEMORY_REQUEST", **res("requests.memory")},
        {"name": "STORAGE_LIMIT", **res("limits.ephemeral-storage", "1Mi")},
    ]
    container = {
        "name": "c",
        "env": env,
        "resources": {
            "requests": {"cpu": "250m", "memory": "32Mi"},
            "limits": {"cpu": "1250m", "memory": "64Mi"},
        },
    }
    assert await build(container) == {
        "CPU_LIMIT": "2",
        "MEMORY_LIMIT": "67108864",
        "CPU_REQUEST": "250",
        "MEMORY_REQUEST": "33554432",
        "STORAGE_LIMIT": "20480",  # node allocatable
    }
    # No limits: node allocatable.
    bare = {"name": "c", "env": env[:2]}
    assert await build(bare) == {"CPU_LIMIT": "4", "MEMORY_LIMIT": str(8 * 2**30)}
    # Pod-level limits come before node allocatable.
    got = await build(bare, None, resources={"limits": {"cpu": "1250m", "memory": "64Mi"}})
    assert got == {"CPU_LIMIT": "2", "MEMORY_LIMIT": "67108864"}
    got = await build(bare, None, resources={"limits": {"cpu": "1250m"}})
    assert got == {"CPU_LIMIT": "2", "MEMORY_LIMIT": str(8 * 2**30)}


async def test_resource_ref_by_container_name() -> None:
    main = {"name": "main", "env": [
        {"name": "SIDE", **res("limits.cpu", "1m", "side")},
        {"name": "INIT", **res("limits.memory", None, "init")},
        {"name": "INIT_CPU", **res("limits.cpu", "1m", "init")},
    ]}  # fmt: skip
    p = pod(main, initContainers=[{"name": "init", "resources": {"limits": {"cpu": "100m"}}}])
    p["spec"]["containers"].append({"name": "side"})
    got = dict(await make_environment_variables(p, main, ctx()))
    # Regular containers get node defaults, init containers do not (as upstream).
    assert got == {"SIDE": "4000", "INIT": "0", "INIT_CPU": "100"}
    bad = {"name": "main", "env": [{"name": "X", **res("limits.cpu", None, "ghost")}]}
    assert await build_error(bad) == "container ghost not found"
    bad = {"name": "main", "env": [{"name": "X", **res("limits.nvidia.com/gpu")}]}
    assert await build_error(bad) == "unsupported container resource : limits.nvidia.com/gpu"


# --- services ---------------------------------------------------------------


def services() -> ServiceStore:
    store = ServiceStore()
    store.replace([
        {"metadata": {"name": "kubernetes", "namespace": "default"},
         "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443}]}},
        {"metadata": {"name": "web", "namespace": "ns"},
         "spec": {"clusterIP": "10.96.5.5", "ports": [{"name": "http", "port": 80},
                                                      {"name": "metrics", "port": 9090}]}},
        {"metadata": {"name": "other", "namespace": "elsewhere"},
         "spec": {"clusterIP": "10.96.6.6", "ports": [{"port": 80}]}},
    ])  # fmt: skip
    return store


async def test_service_links() -> None:
    env = [
        {"name": "WEB_SERVICE_PORT", "value": "overridden"},
        {"name": "URL", "value": "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT_HTTP)"},
    ]
    got = await make_environment_variables(
        pod({}), {"name": "c", "env": env}, ctx(services=services())
    )
    d = dict(got)
    assert len(d) == len(got)
    assert d["WEB_SERVICE_PORT"] == "overridden"
    assert d["URL"] == "http://10.96.5.5:80"
    assert d["WEB_SERVICE_PORT_METRICS"] == "9090"
    assert d["WEB_PORT_9090_TCP"] == "tcp://10.96.5.5:9090"
    assert d["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert d["KUBERNETES_PORT_443_TCP_ADDR"] == "10.96.0.1"
    assert "OTHER_SERVICE_HOST" not in d
    # Declared variables first, then the service ones.
    assert [k for k, _ in got[:2]] == ["WEB_SERVICE_PORT", "URL"]


async def test_service_links_disabled_keep_master() -> None:
    container = {"name": "c", "env": [{"name": "W", "value": "$(WEB_SERVICE_HOST)"}]}
    p = pod(container, enableServiceLinks=False)
    d = dict(await make_environment_variables(p, container, ctx(services=services())))
    assert d["W"] == "$(WEB_SERVICE_HOST)"
    assert not any(k.startswith("WEB_") for k in d)
    assert d["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"


async def test_services_not_synced() -> None:
    container = {"name": "c"}
    unsynced = ctx(services=ServiceStore())
    assert await build_error(container, unsynced) == (
        "services have not yet been read at least once, cannot construct envvars"
    )
    static = pod(container)
    static["metadata"]["annotations"]["kubernetes.io/config.source"] = "file"
    assert await make_environment_variables(static, container, unsynced) == []


async def test_standalone_has_no_service_env() -> None:
    assert await build({"name": "c", "env": [{"name": "A", "value": "1"}]}, ctx()) == {"A": "1"}
