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
from kubelet.objectcache import ObjectGetter, ObjectNotFoundError
from kubelet.types import Container, Pod, Quantity, ResourceFieldSelector, ResourceList, is_static


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
    except Exception as err:  # ObjectGetter's contract: the message is fit for the event
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


async def make_environment_variables(
    pod: Pod, container: Container, ctx: EnvContext
) -> list[tuple[str, str]]:
    """The container's environment as (name, value) pairs, each name once."""
    spec = pod["spec"]
    namespace = pod["metadata"].get("namespace") or "default"

    service_env: Mapping[str, str] = {}
    if ctx.services is not None:
        # KUBERNETES_SERVICE_HOST must not go missing because the kubelet started
        # its pods before it read the services; static pods may not wait for that.
        if not is_static(pod) and not ctx.services.has_synced():
            raise ContainerConfigError(
                "services have not yet been read at least once, cannot construct envvars"
            )
        enable_links = spec.get("enableServiceLinks")
        service_env = ctx.services.service_env(namespace, enable_links is not False)

    configmaps: dict[str, dict[str, Any]] = {}
    secrets: dict[str, dict[str, str]] = {}

    async def configmap(name: str, optional: bool) -> dict[str, Any] | None:
        cm = configmaps.get(name)
        if cm is None:
            cm = await _get(ctx.configmaps, "configMap", namespace, name, optional)
            if cm is None:
                return None
            configmaps[name] = cm
        return cm

    async def secret(name: str, optional: bool) -> dict[str, str] | None:
        data = secrets.get(name)
        if data is None:
            obj = await _get(ctx.secrets, "secret", namespace, name, optional)
            if obj is None:
                return None
            data = secrets[name] = _secret_data(obj)
        return data

    env: dict[str, str] = {}
    for env_from in container.get("envFrom") or []:
        prefix = env_from.get("prefix") or ""
        if (cm_ref := env_from.get("configMapRef")) is not None:
            cm = await configmap(cm_ref.get("name") or "", bool(cm_ref.get("optional")))
            data: Mapping[str, Any] = (cm.get("data") or {}) if cm is not None else {}
        elif (secret_ref := env_from.get("secretRef")) is not None:
            data = (
                await secret(secret_ref.get("name") or "", bool(secret_ref.get("optional"))) or {}
            )
        else:
            continue
        for k, v in data.items():
            env[prefix + k] = str(v)

    mapping = mapping_func_for(env, service_env)
    pod_ips: list[str] | None = None
    allocatable: ResourceList | None = None
    for var in container.get("env") or []:
        name = var["name"]
        value = var.get("value") or ""
        source = var.get("valueFrom")
        if value:
            value = expand(value, mapping)
        elif source:
            if (field_ref := source.get("fieldRef")) is not None:
                if pod_ips is None:
                    pod_ips = sort_pod_ips(ctx.pod_ips, ctx.node_ips)
                try:
                    value = pod_field_value(pod, field_ref, ctx.host_ips, pod_ips)
                except ValueError as err:
                    raise ContainerConfigError(str(err)) from err
            elif (res_ref := source.get("resourceFieldRef")) is not None:
                if allocatable is None:
                    allocatable = pod_level_allocatable(pod, ctx.node_allocatable)
                try:
                    value = _resource_value(res_ref, pod, container, allocatable)
                except ValueError as err:
                    raise ContainerConfigError(str(err)) from err
            elif (cm_key := source.get("configMapKeyRef")) is not None:
                cm_name, key, optional = (
                    cm_key.get("name") or "",
                    cm_key.get("key") or "",
                    bool(cm_key.get("optional")),
                )
                cm = await configmap(cm_name, optional)
                if cm is None:
                    continue
                found = (cm.get("data") or {}).get(key)
                if found is None:
                    if optional:
                        continue
                    raise ContainerConfigError(
                        f"couldn't find key {key} in ConfigMap {namespace}/{cm_name}"
                    )
                value = str(found)
            elif (secret_key := source.get("secretKeyRef")) is not None:
                s_name, key, optional = (
                    secret_key.get("name") or "",
                    secret_key.get("key") or "",
                    bool(secret_key.get("optional")),
                )
                sdata = await secret(s_name, optional)
                if sdata is None:
                    continue
                found = sdata.get(key)
                if found is None:
                    if optional:
                        continue
                    raise ContainerConfigError(
                        f"couldn't find key {key} in Secret {namespace}/{s_name}"
                    )
                value = found
        env[name] = value

    result = list(env.items())
    if env.keys().isdisjoint(service_env.keys()):
        result += service_env.items()  # the usual case: a copy in C, no per-item test
    else:
        result += [(k, v) for k, v in service_env.items() if k not in env]
    return result
