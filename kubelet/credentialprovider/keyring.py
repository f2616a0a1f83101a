"""Which credentials go with an image (keyring.go upstream).

A key is a registry host with an optional path (`registry.example.com:5000/team`);
a key matches an image whose registry host has as many dot-separated parts,
each matching the key's part as a glob (`*.example.com`), the same port, and
whose path starts with the key's path. Every matching key contributes its
credentials, longest keys first; when none match, an image on Docker Hub also
gets the credentials stored for `index.docker.io`.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubelet.credentialprovider.config import DockerConfig

log = logging.getLogger(__name__)

DEFAULT_REGISTRY_HOST = "index.docker.io"


@dataclass(frozen=True)
class SecretCoordinates:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class AuthConfig:
    """What goes to the runtime's PullImage; `source` says where it came from."""

    username: str = ""
    password: str = ""
    auth: str = ""
    email: str = ""
    server_address: str = ""
    identity_token: str = ""
    registry_token: str = ""
    source: SecretCoordinates | None = None


class DockerKeyring(Protocol):
    def lookup(self, image: str) -> list[AuthConfig]:
        """The credentials to try for this repository (`host[:port]/path`), in order."""
        ...


class ExternalKeyring(Protocol):
    """Credentials that depend on the pod too (the credential provider plugins)."""

    async def lookup(self, image: str, pod: dict[str, Any]) -> list[AuthConfig]: ...


_BAD_HOST = re.compile(r"[\s\x00-\x1f\x7f%]")


def parse_schemeless_url(value: str) -> tuple[str, str]:
    """(host[:port], path) of `value` read as if it had an https:// scheme.
    Raises ValueError for what Go's url.Parse refuses (a bad port, spaces)."""
    rest = value
    for stop in "?#":
        rest = rest.split(stop, 1)[0]
    host, slash, path = rest.partition("/")
    host = host.rpartition("@")[2]  # userinfo is not part of the host
    if _BAD_HOST.search(host):
        raise ValueError(f"invalid character in host name {host!r}")
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise ValueError(f"missing ']' in host {host!r}")
        port = host[end + 1 :]
        if port and not ((port.startswith(":") and port[1:].isdigit()) or port == ":"):
            raise ValueError(f"invalid port {port!r} after host")
    elif ":" in host:
        port = host.rsplit(":", 1)[1]
        if port and not port.isdigit():
            raise ValueError(f"invalid port {':' + port!r} after host")
    return host, slash + path


def _split_host(host: str) -> tuple[list[str], str]:
    """Host parts and port (net.SplitHostPort; no port when it does not parse)."""
    if host.startswith("["):
        end = host.find("]")
        rest = host[end + 1 :]
        if rest.startswith(":"):
            return host[1:end].split("."), rest[1:]
        return host.split("."), ""
    if host.count(":") == 1:
        h, port = host.split(":")
        return h.split("."), port
    return host.split("."), ""


def _glob(pattern: str, name: str) -> bool:
    # Go's filepath.Match negates a class with '^'; fnmatch with '!'.
    return fnmatch.fnmatchcase(name, pattern.replace("[^", "[!"))


def urls_match(glob: str, target: str) -> bool:
    """URLsMatchStr: does the key `glob` cover the repository `target`?"""
    try:
        g_host, g_path = parse_schemeless_url(glob)
        t_host, t_path = parse_schemeless_url(target)
    except ValueError:
        return False
    g_parts, g_port = _split_host(g_host)
    t_parts, t_port = _split_host(t_host)
    if g_port != t_port or len(g_parts) != len(t_parts):
        return False
    if not t_path.startswith(g_path):
        return False
    return all(_glob(g, t) for g, t in zip(g_parts, t_parts, strict=True))


def is_default_registry_match(image: str) -> bool:
    """An image on Docker Hub: no registry host, or docker.io / index.docker.io."""
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep:
        return True
    if first in ("docker.io", DEFAULT_REGISTRY_HOST):
        return True
    return not any(ch in first for ch in ".:")


def _key(location: str) -> str | None:
    value = location
    if not value.startswith(("https://", "http://")):
        value = "https://" + value
    try:
        host, path = parse_schemeless_url(value.split("://", 1)[1])
    except ValueError as err:
        log.error("Entry %r in dockercfg invalid (%s), ignoring", location, err)
        return None
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]  # the API version is not part of the key
    return host + path if path and path != "/" else host


class BasicDockerKeyring:
    """Credentials by key, built once from docker configs (not shared between
    pods: each sync builds its own from the pod's pull secrets)."""

    def __init__(self) -> None:
        self._creds: dict[str, list[AuthConfig]] = {}
        self._index: list[str] = []

    def add(self, source: SecretCoordinates | None, config: DockerConfig) -> None:
        for location, entry in config.items():
            key = _key(location)
            if key is None:
                continue
            self._creds.setdefault(key, []).append(
                AuthConfig(
                    username=entry.username,
                    password=entry.password,
                    email=entry.email,
                    source=source,
                )
            )
        # Reverse order: a longer (more specific) key before its prefix.
        self._index = sorted(self._creds, reverse=True)

    def lookup(self, image: str) -> list[AuthConfig]:
        out: list[AuthConfig] = []
        for key in self._index:
            if urls_match(key, image):
                out += self._creds[key]
        if out:
            return out
        if is_default_registry_match(image):
            return list(self._creds.get(DEFAULT_REGISTRY_HOST, ()))
        return []


class UnionDockerKeyring:
    """Every keyring's credentials, in the keyrings' order."""

    def __init__(self, keyrings: Sequence[DockerKeyring]) -> None:
        self.keyrings = tuple(keyrings)

    def lookup(self, image: str) -> list[AuthConfig]:
        return [a for k in self.keyrings for a in k.lookup(image)]
