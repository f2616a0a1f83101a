"""Service environment variables (pkg/kubelet/envvars and the service side of
kubelet_pods.go getServiceEnvVarMap upstream), and the services they come from.

Every container gets `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT[_<PORT>]` and
the Docker-link variables of the services in its pod's namespace (when
enableServiceLinks), and always those of `kubernetes` in `default`. Services
come from one list+watch of all services on the node (ServiceInformer); the
variables of a namespace are built once and kept until a service there changes,
so starting a container costs a dict lookup, not a pass over the services.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kubelet.client.reflector import Reflector
from kubelet.client.rest import APIClient

Service = dict[str, Any]

MASTER_NAMESPACE = "default"
MASTER_SERVICE = "kubernetes"


def is_service_ip_set(service: Service) -> bool:
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def _env_name(name: str) -> str:
    return name.replace("-", "_").upper()


def _join_host_port(host: str, port: int) -> str:
    # Go's net.JoinHostPort brackets any host containing a colon (IPv6).
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def from_services(services: Iterable[Service]) -> list[tuple[str, str]]:
    """The variables for these services, in order (FromServices)."""
    result: list[tuple[str, str]] = []
    for svc in services:
        if not is_service_ip_set(svc):
            continue
        spec = svc["spec"]
        ports = spec.get("ports") or []
        if not ports:  # invalid for a service with a cluster IP; upstream would crash
            continue
        ip = str(spec["clusterIP"])
        prefix = _env_name(svc["metadata"]["name"])
        result.append((prefix + "_SERVICE_HOST", ip))
        port_var = prefix + "_SERVICE_PORT"
        result.append((port_var, str(int(ports[0]["port"]))))
        for sp in ports:
            if sp.get("name"):
                result.append((f"{port_var}_{_env_name(sp['name'])}", str(int(sp["port"]))))
        # Docker-link variables; Docker special-cases the first port.
        for i, sp in enumerate(ports):
            port = int(sp["port"])
            proto = str(sp.get("protocol") or "TCP")
            url = f"{proto.lower()}://{_join_host_port(ip, port)}"
            if i == 0:
                result.append((prefix + "_PORT", url))
            pp = f"{prefix}_PORT_{port}_{proto.upper()}"
            result += [
                (pp, url),
                (pp + "_PROTO", proto.lower()),
                (pp + "_PORT", str(port)),
                (pp + "_ADDR", ip),
            ]
    return result


def service_env_var_map(
    namespace_services: Iterable[Service],
    master: Service | None,
    enable_service_links: bool,
) -> dict[str, str]:
    """getServiceEnvVarMap: the namespace's services (with service links) plus
    default/kubernetes, unless the namespace has its own `kubernetes`."""
    chosen: dict[str, Service] = {}
    if enable_service_links:
        for svc in namespace_services:
            if is_service_ip_set(svc):
                chosen[svc["metadata"]["name"]] = svc
    if master is not None and is_service_ip_set(master):
        chosen.setdefault(MASTER_SERVICE, master)
    return dict(from_services(chosen[k] for k in sorted(chosen)))


class ServiceLister(Protocol):
    """The services a pod's environment is built from."""

    def has_synced(self) -> bool:
        """False until the first list has been read."""
        ...

    def services(self, namespace: str) -> list[Service]: ...

    def service_env(self, namespace: str, enable_service_links: bool) -> Mapping[str, str]:
        """service_env_var_map for a pod in this namespace; callers must not modify it."""
        ...


class ServiceStore:
    """Services by namespace and name, with the env maps built from them cached
    per namespace until a service there (or the master service) changes."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, Service]] = {}
        self._env: dict[tuple[str, bool], dict[str, str]] = {}
        self._synced = False

    def has_synced(self) -> bool:
        return self._synced

    def services(self, namespace: str) -> list[Service]:
        return list(self._by_ns.get(namespace, {}).values())

    def service_env(self, namespace: str, enable_service_links: bool) -> Mapping[str, str]:
        key = (namespace, enable_service_links)
        env = self._env.get(key)
        if env is None:
            ns = self._by_ns.get(namespace, {})
            master = self._by_ns.get(MASTER_NAMESPACE, {}).get(MASTER_SERVICE)
            env = service_env_var_map(ns.values(), master, enable_service_links)
            self._env[key] = env
        return env

    def replace(self, services: Iterable[Service]) -> None:
        by_ns: dict[str, dict[str, Service]] = {}
        for svc in services:
            md = svc.get("metadata") or {}
            by_ns.setdefault(md.get("namespace") or "", {})[md.get("name") or ""] = _slim(svc)
        self._by_ns = by_ns
        self._env.clear()
        self._synced = True

    def upsert(self, svc: Service) -> None:
        md = svc.get("metadata") or {}
        ns, name = md.get("namespace") or "", md.get("name") or ""
        self._by_ns.setdefault(ns, {})[name] = _slim(svc)
        self._invalidate(ns, name)

    def delete(self, svc: Service) -> None:
        md = svc.get("metadata") or {}
        ns, name = md.get("namespace") or "", md.get("name") or ""
        services = self._by_ns.get(ns)
        if services is not None:
            services.pop(name, None)
            if not services:
                del self._by_ns[ns]
        self._invalidate(ns, name)

    def _invalidate(self, namespace: str, name: str) -> None:
        if namespace == MASTER_NAMESPACE and name == MASTER_SERVICE:
            self._env.clear()  # in every namespace's map
        else:
            self._env.pop((namespace, True), None)
            self._env.pop((namespace, False), None)


def _slim(svc: Service) -> Service:
    """Only what the variables need: a node may hold thousands of services."""
    md = svc.get("metadata") or {}
    spec = svc.get("spec") or {}
    return {
        "metadata": {"name": md.get("name") or "", "namespace": md.get("namespace") or ""},
        "spec": {"clusterIP": spec.get("clusterIP") or "", "ports": [
            {"name": p.get("name") or "", "port": p.get("port"), "protocol": p.get("protocol") or ""}
            for p in spec.get("ports") or []
        ]},
    }  # fmt: skip


class ServiceInformer(ServiceStore):
    """A ServiceStore kept current by a list+watch of all services."""

    def __init__(self, client: APIClient) -> None:
        super().__init__()
        self.reflector = Reflector(client, "/api/v1/services", {}, self._on_list, self._on_event)

    async def _on_list(self, items: list[dict[str, Any]]) -> None:
        self.replace(items)

    async def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED":
            self.delete(obj)
        elif etype in ("ADDED", "MODIFIED"):
            self.upsert(obj)

    async def run(self, stop: asyncio.Event) -> None:
        await self.reflector.run(stop)
