"""Docker config files as they appear in pull secrets (config.go upstream):
`.dockerconfigjson` is `{"auths": {<registry>: <entry>}}`, the legacy
`.dockercfg` is the `{<registry>: <entry>}` map itself. An entry's `auth` is
base64("user:password") and wins over its username and password."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any


class DockerConfigError(ValueError):
    """A docker config that cannot be read; the message names what is wrong."""


@dataclass(frozen=True)
class DockerConfigEntry:
    username: str = ""
    password: str = ""
    email: str = ""


DockerConfig = dict[str, DockerConfigEntry]


def _decode_auth(field: str) -> tuple[str, str]:
    # Padded and unpadded base64 are both accepted, as upstream.
    try:
        if field.strip().endswith("="):
            raw = base64.b64decode(field, validate=True)
        else:
            raw = base64.b64decode(field + "=" * (-len(field) % 4), validate=True)
    except (binascii.Error, ValueError) as err:
        raise DockerConfigError(f"illegal base64 data in auth field: {err}") from None
    user, sep, password = raw.decode("utf-8", "replace").partition(":")
    if not sep:
        raise DockerConfigError(
            "unable to parse auth field, must be formatted as base64(username:password)"
        )
    return user, password


def _str(entry: dict[str, Any], key: str, where: str) -> str:
    v = entry.get(key, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise DockerConfigError(f"{where}: field {key!r} must be a string")
    return v


def _entry(where: str, raw: object) -> DockerConfigEntry:
    if raw is None:
        return DockerConfigEntry()
    if not isinstance(raw, dict):
        raise DockerConfigError(f"{where}: an entry must be an object")
    user, password = _str(raw, "username", where), _str(raw, "password", where)
    auth = _str(raw, "auth", where)
    if auth:
        user, password = _decode_auth(auth)
    return DockerConfigEntry(user, password, _str(raw, "email", where))


def _load(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise DockerConfigError(f"invalid JSON: {err}") from None


def _config(raw: object) -> DockerConfig:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DockerConfigError("registries must be a JSON object")
    return {str(k): _entry(str(k), v) for k, v in raw.items()}


def read_docker_config_json(data: bytes) -> DockerConfig:
    """The `auths` of a `.dockerconfigjson`."""
    doc = _load(data)
    if not isinstance(doc, dict):
        raise DockerConfigError("a .dockerconfigjson must be a JSON object")
    return _config(doc.get("auths"))


def read_dockercfg(data: bytes) -> DockerConfig:
    """A legacy `.dockercfg`."""
    return _config(_load(data))
