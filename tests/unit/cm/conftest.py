"""Fixtures of the resource manager tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture
def short_root() -> Iterator[str]:
    """A root dir short enough for device-plugins/kubelet.sock (107 bytes at most)."""
    path = tempfile.mkdtemp(prefix="cm", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)
