"""Fixtures of the cluster tests: a registry that wants the password of
pull_secrets.USER (one per test module that asks for it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kubelet.testing.containerd import Containerd
from kubelet.testing.parts import start_registry
from kubelet.testing.registry import Registry
from tests.integration.cluster.pull_secrets import PASSWORD, USER


@pytest.fixture(scope="module")
def private_registry(containerd: Containerd) -> Iterator[Registry]:
    r = Registry(os.path.join(containerd.directory, "private-registry"), auth=(USER, PASSWORD))
    start_registry(r, containerd)
    try:
        yield r
    finally:
        r.stop()
