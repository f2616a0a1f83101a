"""Shared pytest configuration.

Fixture modules for the real parts (simulated runtime, containerd, control
plane) live in tests/fixtures/ and are registered here.
"""

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from kubelet.testing.process import remove_log_links_into, unmount_under

pytest_plugins: list[str] = [
    "tests.fixtures.cluster",
    "tests.fixtures.simruntime",
    "tests.fixtures.containerd",
    "tests.fixtures.conformance",
    "tests.fixtures.dbus",
    "tests.fixtures.part_groups",
]

# CI runs a fixed set of examples (the same on every run); developers get fresh
# random ones, which is how the equivalence tests find new cases.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _unmount_under_tmp_path(request: pytest.FixtureRequest) -> Iterator[None]:
    """Volumes on tmpfs (Memory emptyDirs, secrets, tokens) that a test's kubelet
    or plugin left mounted in its tmp_path are unmounted once the test is done
    (after its own fixtures stopped), so no mount outlives the test."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    base = request.getfixturevalue("tmp_path")  # torn down after this one
    yield
    unmount_under(base)


@pytest.fixture(autouse=True, scope="session")
def _no_log_links_into_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The host's legacy log links to containers of the tests' kubelets go when
    the session ends (their logs were in the session's temporary dirs)."""
    yield
    remove_log_links_into(tmp_path_factory.getbasetemp())
