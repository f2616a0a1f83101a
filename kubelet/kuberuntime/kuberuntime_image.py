"""Images of a pod's containers: EnsureImageExists with its pull policies,
pull secrets and ImagePullBackOff (images/image_manager.go), and the pull
itself with credentials (kuberuntime_image.go): with none, one anonymous pull;
otherwise each matching credential in turn until one works, and when none
does, every attempt's error together."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kubelet.credentialprovider.config import DockerConfigError
from kubelet.credentialprovider.keyring import (
    AuthConfig,
    DockerKeyring,
    ExternalKeyring,
    UnionDockerKeyring,
)
from kubelet.credentialprovider.secrets import make_docker_keyring
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService
from kubelet.images.metrics import IMAGE_PULL_DURATION, image_size_bucket
from kubelet.images.puller import ImagePuller, PullQPSExceeded
from kubelet.kuberuntime.backoff import Backoff
from kubelet.kuberuntime.helpers import PodReporter, SyncResult
from kubelet.types import Container, Pod, Secret, uid
from kubelet.util.parsers import ImageNameError, parse_image_name
from kubelet.util.pod_startup_latency import PodStartupLatencyTracker


class PullSecretsGetter(Protocol):
    """The pod's image pull secrets that could be read (getPullSecretsForPod)."""

    async def get_pull_secrets(self, pod: Pod) -> list[Secret]: ...


@dataclass(frozen=True)
class PullCredentials:
    """Where an image pull's credentials come from, in the order they are tried."""

    # The pod's imagePullSecrets (None: no API server, pulls go anonymous).
    pod_secrets: PullSecretsGetter | None = None
    # The node's own docker config files, after the pod's secrets.
    node_keyring: DockerKeyring | None = None
    # The exec credential provider plugins, after both (as upstream's union).
    plugins: ExternalKeyring | None = None


class PullError(Exception):
    """Every attempt failed; the message is upstream's aggregate of them."""

    def __init__(self, failures: Sequence[errors.CRIError]) -> None:
        msgs = [e.message for e in failures]
        # errors.NewAggregate: one error as is, several in brackets.
        super().__init__(msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]")
        self.failures = list(failures)


def to_cri_auth(a: AuthConfig) -> pb.AuthConfig:
    return pb.AuthConfig(
        username=a.username,
        password=a.password,
        auth=a.auth,
        server_address=a.server_address,
        identity_token=a.identity_token,
        registry_token=a.registry_token,
    )


async def pull_image(
    images: ImageService,
    spec: pb.ImageSpec,
    credentials: Sequence[AuthConfig],
    sandbox_config: pb.PodSandboxConfig | None,
) -> tuple[str, AuthConfig | None]:
    """(image ref, the credential that worked). Raises PullError."""
    if not credentials:
        try:
            return await images.pull_image(spec, None, sandbox_config), None
        except errors.CRIError as err:
            raise PullError([err]) from err
    failures: list[errors.CRIError] = []
    for cred in credentials:
        try:
            return await images.pull_image(spec, to_cri_auth(cred), sandbox_config), cred
        except errors.CRIError as err:
            failures.append(err)
    raise PullError(failures)


# (image ref, the image when its status is known, why it cannot be had)
Ensured = tuple[str, pb.Image | None, str | None]


class ImageManager:
    def __init__(
        self,
        images: ImageService,
        reporter: PodReporter,
        backoff: Backoff,
        puller: ImagePuller,
        credentials: PullCredentials,
        startup: PodStartupLatencyTracker | None = None,
    ) -> None:
        self.images = images
        self.reporter = reporter
        self.backoff = backoff
        # serializeImagePulls / maxParallelImagePulls / registryPullQPS / registryBurst.
        self.puller = puller
        # The pod's secrets are read by the runtime manager and passed to each pull.
        self.node_keyring = credentials.node_keyring
        self.credential_plugins = credentials.plugins
        # The pod startup SLI leaves image pulls out: it hears of each.
        self.startup = startup
        self._pull_locks: dict[str, asyncio.Lock] = {}
        # pod UID -> image -> why its last pull failed, told while the back-off lasts.
        self._prev_pull_err: dict[str, dict[str, str]] = {}

    def forget(self, pod_uid: str) -> None:
        self._prev_pull_err.pop(pod_uid, None)

    async def ensure_image(
        self,
        pod: Pod,
        c: Container,
        sandbox_cfg: pb.PodSandboxConfig,
        res: SyncResult,
        pull_secrets: list[Secret] | None = None,
    ) -> Ensured:
        """EnsureImageExists. A back-off that blocks the pull is recorded in res."""
        image, cname = c["image"], c["name"]
        try:
            repo, _tag, _digest = parse_image_name(image)
        except ImageNameError as err:
            msg = f'Failed to apply default image tag "{image}": {err}'
            return self._fail(pod, cname, "InspectFailed", "InvalidImageName", msg)
        spec = pb.ImageSpec(image=image)
        try:
            present = await self.images.image_status(spec)
        except errors.CRIError as err:
            msg = f'Failed to inspect image "{image}": {err.message}'
            return self._fail(pod, cname, "InspectFailed", "ImageInspectError", msg)
        policy = c.get("imagePullPolicy", "IfNotPresent")
        if policy == "Never" and present is None:
            msg = f'Container image "{image}" is not present with pull policy of Never'
            return self._fail(pod, cname, "ErrImageNeverPull", "ErrImageNeverPull", msg)
        if present is not None and policy in ("Never", "IfNotPresent"):
            return str(present.id), present, None
        try:
            credentials = self._credentials(repo, pull_secrets or [])
        except DockerConfigError as err:
            # Upstream's error is its own reason: no pull is attempted, no back-off.
            return self._fail(pod, cname, None, str(err), str(err))
        if self.credential_plugins is not None:
            credentials += await self.credential_plugins.lookup(repo, pod)
        return await self._pull(pod, cname, spec, credentials, sandbox_cfg, res)

    def _credentials(self, repo: str, pull_secrets: list[Secret]) -> list[AuthConfig]:
        keyrings: list[DockerKeyring] = [make_docker_keyring(pull_secrets)]
        if self.node_keyring is not None:
            keyrings.append(self.node_keyring)
        return UnionDockerKeyring(keyrings).lookup(repo)

    async def _pull(
        self,
        pod: Pod,
        cname: str,
        spec: pb.ImageSpec,
        credentials: list[AuthConfig],
        sandbox_cfg: pb.PodSandboxConfig,
        res: SyncResult,
    ) -> Ensured:
        image, pod_uid = spec.image, uid(pod)
        key = f"{pod_uid}_{image}"
        # "Is the time since the last failed pull shorter than the back-off?"
        # (IsInBackOffSinceUpdate upstream): 10 s, 20 s, 40 s ... after each failure.
        if self.backoff.in_backoff_since_update(key):
            res.backoff_until(self.backoff.remaining(key))
            msg = f'Back-off pulling image "{image}"'
            self.reporter.event(pod, "Normal", "BackOff", msg, cname)
            prev = self._prev_pull_err.get(pod_uid, {}).get(image)
            return self._fail(
                pod, cname, None, "ImagePullBackOff", f"{msg}: {prev}" if prev else msg
            )
        self._prev_pull_err.get(pod_uid, {}).pop(image, None)
        self.reporter.event(pod, "Normal", "Pulling", f'Pulling image "{image}"', cname)
        lock = self._pull_locks.setdefault(image, asyncio.Lock())
        t = time.monotonic()

        async def timed_pull() -> tuple[str, pb.Image | None, float]:
            start = time.monotonic()
            ref, _used = await pull_image(self.images, spec, credentials, sandbox_cfg)
            pulled = await self._pulled_image(ref)
            return ref, pulled, time.monotonic() - start

        if self.startup is not None:
            self.startup.record_image_started_pulling(pod_uid)
        try:
            async with lock:  # never two pulls of one image at once
                ref, pulled, took = await self.puller.pull(timed_pull)
            if self.startup is not None:
                self.startup.record_image_finished_pulling(pod_uid)
        except (PullError, PullQPSExceeded) as err:
            self.backoff.next(key, self.backoff.now())
            msg = f'Failed to pull image "{image}": {err}'
            self.reporter.event(pod, "Warning", "Failed", msg, cname)
            self._prev_pull_err.setdefault(pod_uid, {})[image] = f"ErrImagePull: {err}"
            return self._fail(pod, cname, None, "ErrImagePull", str(err))
        waited = time.monotonic() - t
        size = pulled.size if pulled is not None else 0
        IMAGE_PULL_DURATION.labels(image_size_bucket(size)).observe(waited)
        msg = (
            f'Successfully pulled image "{image}" in {took:.3f}s ({waited:.3f}s including '
            f"waiting). Image size: {size} bytes."
        )
        self.reporter.event(pod, "Normal", "Pulled", msg, cname)
        return ref, pulled, None

    async def _pulled_image(self, ref: str) -> pb.Image | None:
        """The image just pulled, for its size (upstream's GetImageSize) and for the
        container's config, which then asks no more; None when the runtime cannot
        say (the config asks again and reports that)."""
        if not ref:
            return None
        try:
            return await self.images.image_status(pb.ImageSpec(image=ref))
        except errors.CRIError:
            return None

    def _fail(
        self, pod: Pod, cname: str, event_reason: str | None, reason: str, msg: str
    ) -> Ensured:
        """The image cannot be had: an event of its own (when event_reason is set),
        then startContainer's, which names the reason, not the message."""
        if event_reason is not None:
            self.reporter.event(pod, "Warning", event_reason, msg, cname)
        return "", None, self.reporter.container_failed(pod, cname, reason, msg, told=reason)
