"""Image pulls with credentials (kuberuntime_image.go upstream): with none,
one anonymous pull; otherwise each matching credential in turn until one
works, and when none does, every attempt's error together."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kubelet.credentialprovider.keyring import AuthConfig
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService

Secret = dict[str, Any]


class PullSecretsGetter(Protocol):
    """The pod's image pull secrets that could be read (getPullSecretsForPod)."""

    async def get_pull_secrets(self, pod: dict[str, Any]) -> list[Secret]: ...


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
