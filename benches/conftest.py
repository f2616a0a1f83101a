"""Benchmarks measure release builds only."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    try:
        import kubelet_native
    except ImportError:
        pytest.exit("benchmarks need the native module: pip install ./rust", returncode=2)
    if kubelet_native.BUILD_PROFILE != "release":
        pytest.exit(
            f"kubelet_native is a {kubelet_native.BUILD_PROFILE} build; benchmarks need release",
            returncode=2,
        )
