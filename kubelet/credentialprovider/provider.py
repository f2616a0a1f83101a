"""The node's own registry credentials (provider.go upstream): the first
docker `config.json` found in the kubelet's root directory, the working
directory, ~/.docker and /.docker, else the first legacy `.dockercfg` in the
root directory, the working directory, ~ and /. Read again at most every
five minutes; these credentials come after the pod's pull secrets."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

from kubelet.credentialprovider.config import (
    DockerConfig,
    DockerConfigError,
    read_docker_config_json,
    read_dockercfg,
)
from kubelet.credentialprovider.keyring import AuthConfig, BasicDockerKeyring

log = logging.getLogger(__name__)

CACHE_LIFETIME = 300.0
CONFIG_JSON = "config.json"
DOCKERCFG = ".dockercfg"


def default_search_paths(root_dir: str) -> tuple[list[str], list[str]]:
    """(directories for config.json, directories for .dockercfg), in order."""
    home = os.path.expanduser("~")
    cwd = os.getcwd()
    return (
        [root_dir, cwd, os.path.join(home, ".docker"), "/.docker"],
        [root_dir, cwd, home, "/"],
    )


def _read_first(
    dirs: Sequence[str], filename: str, parse: Callable[[bytes], DockerConfig]
) -> DockerConfig | None:
    for d in dirs:
        path = os.path.abspath(os.path.join(d, filename))
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            continue
        except OSError as err:
            log.debug("while trying to read %s: %s", path, err)
            continue
        try:
            cfg = parse(data)
        except DockerConfigError as err:
            log.debug("couldn't get the config from %s: %s", path, err)
            continue
        log.debug("found registry credentials in %s", path)
        return cfg
    return None


class NodeDockerKeyring:
    """A DockerKeyring over the node's docker config files."""

    def __init__(
        self,
        root_dir: str,
        lifetime: float = CACHE_LIFETIME,
        clock: Callable[[], float] = time.monotonic,
        search_paths: tuple[list[str], list[str]] | None = None,
    ) -> None:
        self.json_dirs, self.cfg_dirs = search_paths or default_search_paths(root_dir)
        self.lifetime = lifetime
        self.clock = clock
        self._keyring = BasicDockerKeyring()
        self._expires = float("-inf")

    def _refresh(self) -> None:
        cfg = _read_first(self.json_dirs, CONFIG_JSON, read_docker_config_json)
        if cfg is None:
            cfg = _read_first(self.cfg_dirs, DOCKERCFG, read_dockercfg)
        keyring = BasicDockerKeyring()
        keyring.add(None, cfg or {})
        # One assignment: a lookup never sees a keyring half built.
        self._keyring, self._expires = keyring, self.clock() + self.lifetime

    def lookup(self, image: str) -> list[AuthConfig]:
        if self.clock() >= self._expires:
            self._refresh()
        return self._keyring.lookup(image)
