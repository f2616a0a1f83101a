"""A container's environment (kubelet_pods.go makeEnvironmentVariables upstream).

Order of resolution, as upstream:
1. `envFrom` sources, in order, each key (with its prefix) set as is; later
   sources override earlier ones. Keys are not checked against env var naming
   (relaxed validation, GA in v1.34).
2. `env` entries in order: a non-empty `value` is `$(VAR)`-expanded against the
   variables set so far and the service variables; otherwise `valueFrom` is
   resolved. An entry overrides an `envFrom` key of the same name; an optional
   reference that cannot be resolved leaves any earlier value in place.
3. The service variables not already set.

Anything that keeps the container from starting raises ContainerConfigError
with upstream's message; the container waits in CreateContainerConfigError and
the pod is retried.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubelet.container.expansion import expand, mapping_func_for
from kubelet.container.runtime import ContainerConfigError
from kubelet.envvars import ServiceLister
from kubelet.fieldpath import (
    extract_container_resource_value,
    find_container,
    merge_container_resource_limits,
    pod_field_value,
    pod_level_allocatable,
    sort_pod_ips,
)
from kubelet.objectcache import OBJECT_UNAVAILABLE, ObjectGetter, ObjectNotFoundError
from kubelet.types import (
    Container,
    KeySelector,
    ObjectFieldSelector,
    Pod,
    Quantity,
    ResourceFieldSelector,
    ResourceList,
    is_static,
)


@dataclass(frozen=True)
class EnvContext:
    """What the environment of one container start depends on besides the pod."""

    # The node's host IPs (InternalIP first, at most one per family): status.hostIP(s).
    host_ips: Sequence[str] = ()
    # The pod's IPs as the runtime reported them: status.podIP(s).
    pod_ips: Sequence[str] = ()
    # The configured --node-ip values: their first family comes first in pod IPs
    # (IPv4 when none is configured).
    node_ips: Sequence[str] = ()
    # Node status allocatable: the default for limits a container does not set.
    node_allocatable: Mapping[str, str] = field(default_factory=dict)
    # None without an API client (standalone): a reference then fails as upstream.
    configmaps: ObjectGetter | None = None
    secrets: ObjectGetter | None = None
    # None in standalone mode: no service variables at all.
    services: ServiceLister | None = None


async def _get(
    getter: ObjectGetter | None, kind: str, namespace: str, name: str, optional: bool
) -> dict[str, Any] | None:
    """The object, or None when it is missing and the reference optional."""
    if getter is None:
        raise ContainerConfigError(f"couldn't get {kind} {namespace}/{name}, no kubeClient defined")
    try:
        return await getter.get(namespace, name)
    except ObjectNotFoundError as err:
        if optional:
            return None
        raise ContainerConfigError(str(err)) from err
    except OBJECT_UNAVAILABLE as err:  # the message is fit for the event
        raise ContainerConfigError(str(err)) from err


def _secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A secret's data, decoded from the API's base64."""
    out = {}
    for k, v in (secret.get("data") or {}).items():
        try:
            raw = base64.b64decode(v or "", validate=True)
        except (binascii.Error, ValueError) as err:
            raise ContainerConfigError(f"invalid base64 in key {k} of the secret") from err
        # CRI env values are protobuf strings: invalid UTF-8 cannot pass anyway.
        out[k] = raw.decode("utf-8", "replace")
    return out


def _resource_value(
    ref: ResourceFieldSelector, pod: Pod, container: Container, allocatable: Mapping[str, Quantity]
) -> str:
    """resourceFieldRef with limits defaulted from allocatable: for this container,
    or a named one (only regular containers get defaults there, as upstream)."""
    name = ref.get("containerName") or ""
    if not name:
        target = container
        limits = merge_container_resource_limits(container, allocatable)
    else:
        target = find_container(pod, name)
        regular = any(c is target for c in pod["spec"].get("containers") or [])
        if regular:
            limits = merge_container_resource_limits(target, allocatable)
        else:
            limits = (target.get("resources") or {}).get("limits") or {}
    requests = (target.get("resources") or {}).get("requests") or {}
    return extract_container_resource_value(ref, limits, requests)


class _Sources:
    """The configMaps and secrets one container start refers to, each fetched
    once (made per call: nothing of one pod's start outlives it)."""

    def __init__(self, ctx: EnvContext, namespace: str) -> None:
        self.ctx, self.namespace = ctx, namespace
        self.data: dict[tuple[str, str], Mapping[str, str]] = {}

    async def get(self, kind: str, name: str, optional: bool) -> Mapping[str, str] | None:
        """The data of the configMap or secret (decoded), or None when it is
        missing and the reference optional."""
        cached = self.data.get((kind, name))
        if cached is not None:
            return cached
        getter = self.ctx.configmaps if kind == "ConfigMap" else self.ctx.secrets
        getter_kind = "configMap" if kind == "ConfigMap" else "secret"
        obj = await _get(getter, getter_kind, self.namespace, name, optional)
        if obj is None:
            return None
        if kind == "ConfigMap":
            data: Mapping[str, str] = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        else:
            data = _secret_data(obj)
        self.data[(kind, name)] = data
        return data

    async def key(self, kind: str, ref: KeySelector) -> str | None:
        """configMapKeyRef / secretKeyRef: the value, or None when an optional
        reference cannot be resolved."""
        name, key, optional = ref.get("name") or "", ref.get("key") or "", bool(ref.get("optional"))
        data = await self.get(kind, name, optional)
        if data is None:
            return None
        found = data.get(key)
        if found is None and not optional:
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {self.namespace}/{name}")
        return found


def _service_env(pod: Pod, ctx: EnvContext, namespace: str) -> Mapping[str, str]:
    if ctx.services is None:
        return {}
    # KUBERNETES_SERVICE_HOST must not go missing because the kubelet started
    # its pods before it read the services; static pods may not wait for that.
    if not is_static(pod) and not ctx.services.has_synced():
        raise ContainerConfigError(
            "services have not yet been read at least once, cannot construct envvars"
        )
    enable_links = pod["spec"].get("enableServiceLinks")
    return ctx.services.service_env(namespace, enable_links is not False)


async def _env_from(container: Container, sources: _Sources, env: dict[str, str]) -> None:
    for env_from in container.get("envFrom") or []:
        prefix = env_from.get("prefix") or ""
        if (cm_ref := env_from.get("configMapRef")) is not None:
            ref, kind = cm_ref, "ConfigMap"
        elif (secret_ref := env_from.get("secretRef")) is not None:
            ref, kind = secret_ref, "Secret"
        else:
            continue
        data = await sources.get(kind, ref.get("name") or "", bool(ref.get("optional"))) or {}
        for k, v in data.items():
            env[prefix + k] = v


class _Fields:
    """Pod IPs and allocatable for fieldRef / resourceFieldRef, worked out on
    first use (most containers refer to neither)."""

    def __init__(self, pod: Pod, container: Container, ctx: EnvContext) -> None:
        self.pod, self.container, self.ctx = pod, container, ctx
        self._pod_ips: list[str] | None = None
        self._allocatable: ResourceList | None = None

    def field(self, ref: ObjectFieldSelector) -> str:
        if self._pod_ips is None:
            self._pod_ips = sort_pod_ips(self.ctx.pod_ips, self.ctx.node_ips)
        try:
            return pod_field_value(self.pod, ref, self.ctx.host_ips, self._pod_ips)
        except ValueError as err:
            raise ContainerConfigError(str(err)) from err

    def resource(self, ref: ResourceFieldSelector) -> str:
        if self._allocatable is None:
            self._allocatable = pod_level_allocatable(self.pod, self.ctx.node_allocatable)
        try:
            return _resource_value(ref, self.pod, self.container, self._allocatable)
        except ValueError as err:
            raise ContainerConfigError(str(err)) from err


async def make_environment_variables(
    pod: Pod, container: Container, ctx: EnvContext
) -> list[tuple[str, str]]:
    """The container's environment as (name, value) pairs, each name once."""
    namespace = pod["metadata"].get("namespace") or "default"
    service_env = _service_env(pod, ctx, namespace)
    sources = _Sources(ctx, namespace)
    env: dict[str, str] = {}
    await _env_from(container, sources, env)
    mapping = mapping_func_for(env, service_env)
    fields = _Fields(pod, container, ctx)
    for var in container.get("env") or []:
        value: str | None = var.get("value") or ""
        source = var.get("valueFrom")
        if value:
            value = expand(value, mapping)
        elif source:
            if (field_ref := source.get("fieldRef")) is not None:
                value = fields.field(field_ref)
            elif (res_ref := source.get("resourceFieldRef")) is not None:
                value = fields.resource(res_ref)
            elif (cm_key := source.get("configMapKeyRef")) is not None:
                value = await sources.key("ConfigMap", cm_key)
            elif (secret_key := source.get("secretKeyRef")) is not None:
                value = await sources.key("Secret", secret_key)
        if value is None:
            continue  # optional and missing: an earlier value stays
        env[var["name"]] = value

    result = list(env.items())
    if env.keys().isdisjoint(service_env.keys()):
        result += service_env.items()  # the usual case: a copy in C, no per-item test
    else:
        result += [(k, v) for k, v in service_env.items() if k not in env]
    return result
