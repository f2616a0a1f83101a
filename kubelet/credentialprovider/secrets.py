"""A keyring from a pod's image pull secrets (credentialprovider/secrets upstream).

Only a `kubernetes.io/dockerconfigjson` secret's `.dockerconfigjson` and a
`kubernetes.io/dockercfg` secret's `.dockercfg` count; any other secret is
passed over. A counted secret whose config does not parse fails the whole
keyring, as upstream: the pull is not attempted with half the credentials.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from kubelet.credentialprovider.config import (
    DockerConfigError,
    read_docker_config_json,
    read_dockercfg,
)
from kubelet.credentialprovider.keyring import BasicDockerKeyring, SecretCoordinates
from kubelet.types import Secret

SECRET_TYPE_DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
SECRET_TYPE_DOCKERCFG = "kubernetes.io/dockercfg"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
DOCKERCFG_KEY = ".dockercfg"


def _data(secret: Secret, key: str) -> bytes:
    raw = (secret.get("data") or {}).get(key) or ""
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError, TypeError) as err:
        raise DockerConfigError(f"{key} is not base64: {err}") from None


def make_docker_keyring(secrets: Iterable[Secret]) -> BasicDockerKeyring:
    """Raises DockerConfigError when a docker config secret does not parse."""
    keyring = BasicDockerKeyring()
    for s in secrets:
        md = s.get("metadata") or {}
        coords = SecretCoordinates(
            str(md.get("uid") or ""), str(md.get("namespace") or ""), str(md.get("name") or "")
        )
        kind = s.get("type")
        if kind == SECRET_TYPE_DOCKER_CONFIG_JSON and (data := _data(s, DOCKER_CONFIG_JSON_KEY)):
            keyring.add(coords, read_docker_config_json(data))
        elif kind == SECRET_TYPE_DOCKERCFG and (data := _data(s, DOCKERCFG_KEY)):
            keyring.add(coords, read_dockercfg(data))
    return keyring
