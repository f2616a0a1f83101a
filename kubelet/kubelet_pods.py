"""What a container gets from the pod's world (kubelet_pods.go): its
environment, its mounts, the pod's DNS settings and hostname. This is the
kubelet's RuntimeHelper: kuberuntime asks it while building sandbox and
container configs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Protocol

from kubelet.container.env import EnvContext, make_environment_variables
from kubelet.container.expansion import expand_subpath_expr
from kubelet.container.hosts import make_hosts_mount
from kubelet.container.mounts import make_block_devices, make_mounts
from kubelet.container.runtime import (
    ContainerConfigError,
    Device,
    DNSSettings,
    Mount,
    RunContainerOptions,
)
from kubelet.events import Recorder
from kubelet.kuberuntime.termination import create_termination_log_file
from kubelet.network.dns import DNSConfigurer, generate_pod_hostname_and_domain
from kubelet.objectcache import OBJECT_GET_ERRORS, ObjectGetter
from kubelet.runtimeclass.runtimeclass_manager import RuntimeClassLookup
from kubelet.types import Container, Pod, Secret, as_secret, name, namespace, object_ref, uid
from kubelet.util import filesystem
from kubelet.volume import MountedVolume
from kubelet.volumemanager import VolumeManager

log = logging.getLogger(__name__)

# Upstream's modes (setupDataDirs in kubelet.go, makePodDataDirs): nothing
# under the root dir is for other users to read or list.
DATA_DIR_MODE = 0o750
# Below the root dir (getPluginsDir, getPluginsRegistrationDir, getPodResourcesDir).
DATA_SUBDIRS = ("pods", "plugins", "plugins_registry", "pod-resources")


def setup_data_dirs(root_dir: str, pod_logs_dir: str) -> None:
    """The kubelet's directories, made 0750 where missing (existing ones keep
    their mode, as upstream's MkdirAll). Blocking."""
    filesystem.mkdir_all(root_dir, DATA_DIR_MODE)
    filesystem.mkdir_all(pod_logs_dir, DATA_DIR_MODE)
    for sub in DATA_SUBDIRS:
        filesystem.mkdir_all(os.path.join(root_dir, sub), DATA_DIR_MODE)


def pod_dir(root_dir: str, pod_uid: str) -> str:
    """<root>/pods/<uid> (getPodDir): the uid must be one plain path component."""
    return os.path.join(root_dir, "pods", filesystem.component(pod_uid, "pod uid"))


def make_pod_data_dirs(root_dir: str, pod_uid: str) -> str:
    """The pod's dir and its volumes and plugins dirs, 0750 (makePodDataDirs). Blocking."""
    d = pod_dir(root_dir, pod_uid)
    filesystem.mkdir_all(os.path.join(d, "volumes"), DATA_DIR_MODE)
    filesystem.mkdir_all(os.path.join(d, "plugins"), DATA_DIR_MODE)
    return d


class HandlerFeatures(Protocol):
    def handler_supports_recursive_read_only(self, handler: str) -> bool: ...


class CachedRuntimeClasses(RuntimeClassLookup, Protocol):
    def cached_handler(self, name: str) -> str | None: ...


class RecursiveReadOnlySupport:
    """runtimeClassSupportsRecursiveReadOnlyMounts: whether the runtime handler
    of the pod's RuntimeClass makes recursive read-only mounts."""

    def __init__(self, handlers: HandlerFeatures, classes: CachedRuntimeClasses | None) -> None:
        self.handlers = handlers
        self.classes = classes

    def cached(self, pod: Pod) -> bool:
        """The same answer from what is known now (for the status, which
        cannot wait for a RuntimeClass list)."""
        name = pod["spec"].get("runtimeClassName") or ""
        handler = self.classes.cached_handler(name) if name and self.classes else ""
        return handler is not None and self.handlers.handler_supports_recursive_read_only(handler)

    async def __call__(self, pod: Pod) -> bool:
        name = pod["spec"].get("runtimeClassName") or ""
        handler = ""
        if name and self.classes is not None:
            try:
                handler = await self.classes.lookup_runtime_handler(name)
            except LookupError as err:
                log.error("Failed to look up the runtime handler of %s: %s", name, err)
                return False
        return self.handlers.handler_supports_recursive_read_only(handler)


class _NoHandlers:
    def handler_supports_recursive_read_only(self, handler: str) -> bool:
        return False


_NO_HANDLERS = _NoHandlers()


class PodRuntimeHelper:
    """Implements container.runtime.RuntimeHelper. Holds no per-call state: up
    to 256 pod workers call it at once."""

    def __init__(
        self,
        root_dir: str,
        dns: DNSConfigurer,
        cluster_domain: str,
        env: EnvContext,
        volumes: VolumeManager,
        handlers: tuple[HandlerFeatures, CachedRuntimeClasses | None] | None = None,
    ) -> None:
        """handlers: the runtime's handler features and the RuntimeClasses, for
        recursive read-only mounts (None: no handler makes them)."""
        self.root_dir = root_dir
        self.rro = RecursiveReadOnlySupport(*(handlers or (_NO_HANDLERS, None)))
        self.dns = dns
        self.cluster_domain = cluster_domain
        # Node-wide inputs of every environment; the pod's IPs are added per call.
        self.env = env
        self.volumes = volumes

    def get_pod_dir(self, pod_uid: str) -> str:
        return pod_dir(self.root_dir, pod_uid)

    async def generate_run_container_options(
        self, pod: Pod, container: Container, pod_ips: list[str]
    ) -> RunContainerOptions:
        try:
            hostname, domain = self.generate_pod_hostname_and_domain(pod)
        except ValueError as err:
            raise ContainerConfigError(str(err)) from err
        envs = await make_environment_variables(
            pod, container, dataclasses.replace(self.env, pod_ips=tuple(pod_ips))
        )
        volumes = self.volumes.get_mounted_volumes(uid(pod))
        rro = any(m.get("recursiveReadOnly") for m in container.get("volumeMounts") or [])
        rro = rro and await self.rro(pod)
        # Sub-path preparation, the hosts file and the termination-log file all
        # touch the disk: one hop off the event loop for the lot, so a slow disk
        # (a journal stalled by someone's fsync) never stalls probes and relists.
        mounts, devices = await asyncio.get_running_loop().run_in_executor(
            None, self._mounts, pod, container, volumes, envs, pod_ips, hostname, domain, rro
        )
        return RunContainerOptions(envs=envs, mounts=mounts, devices=devices, hostname=hostname)

    def _mounts(
        self,
        pod: Pod,
        container: Container,
        volumes: Mapping[str, MountedVolume],
        envs: list[tuple[str, str]],
        pod_ips: list[str],
        hostname: str,
        domain: str,
        rro: bool,
    ) -> tuple[list[Mount], list[Device]]:
        try:
            # The syncer made them; cheap to be sure.
            pod_dir = make_pod_data_dirs(self.root_dir, uid(pod))
        except (OSError, ValueError) as err:
            raise ContainerConfigError(f"failed to make the pod's directory: {err}") from err

        def expand(expr: str) -> str:
            try:
                return expand_subpath_expr(expr, envs)
            except ValueError as err:
                raise ContainerConfigError(str(err)) from err

        mounts = make_mounts(pod, container, volumes, expand, pod_dir, rro)
        try:
            hosts = make_hosts_mount(pod, container, pod_dir, pod_ips, hostname, domain)
        except OSError as err:
            raise ContainerConfigError(f"failed to write the pod's hosts file: {err}") from err
        if hosts is not None:
            mounts.append(hosts)
        path = container.get("terminationMessagePath")
        if path and not any(m.container_path == path for m in mounts):
            host = create_termination_log_file(pod_dir, container["name"])
            if host:
                mounts.append(Mount(container_path=path, host_path=host, selinux_relabel=True))
        return mounts, make_block_devices(container, volumes)

    def generate_pod_hostname_and_domain(self, pod: Pod) -> tuple[str, str]:
        return generate_pod_hostname_and_domain(pod, self.cluster_domain)

    def get_pod_dns(self, pod: Pod) -> DNSSettings:
        return self.dns.get_pod_dns(pod)


class PullSecretGetter:
    """getPullSecretsForPod: the pod's imagePullSecrets read through the
    kubelet's secret cache (the Node authorizer allows a secret a pod bound to
    this node references). One that cannot be read is named in a warning
    event and the pull goes on without it, as upstream."""

    def __init__(self, secrets: ObjectGetter, recorder: Recorder | None = None) -> None:
        self.secrets = secrets
        self.recorder = recorder

    async def get_pull_secrets(self, pod: Pod) -> list[Secret]:
        out: list[Secret] = []
        failed: list[str] = []
        ns = namespace(pod)
        for ref in pod["spec"].get("imagePullSecrets") or []:
            secret_name = (ref or {}).get("name") or ""
            if not secret_name:
                continue  # the API has let empty names through: nothing to read
            try:
                out.append(as_secret(await self.secrets.get(ns, secret_name)))
            except OBJECT_GET_ERRORS as err:
                # As upstream: the pull goes on without that secret.
                log.info(
                    "Unable to retrieve pull secret %s/%s for pod %s/%s, the image pull may "
                    "not succeed: %s",
                    ns,
                    secret_name,
                    ns,
                    name(pod),
                    err,
                )
                failed.append(secret_name)
        if failed and self.recorder is not None:
            self.recorder.event(
                object_ref(pod),
                "Warning",
                "FailedToRetrieveImagePullSecret",
                f"Unable to retrieve some image pull secrets ({', '.join(failed)}); attempting "
                "to pull the image may not succeed.",
            )
        return out
