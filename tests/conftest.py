"""Shared pytest configuration.

Fixture modules for the real parts (simulated runtime, containerd, control
plane) live in tests/fixtures/ and are registered here.
"""

import os

from hypothesis import settings

pytest_plugins: list[str] = [
    "tests.fixtures.cluster",
    "tests.fixtures.simruntime",
    "tests.fixtures.containerd",
    "tests.fixtures.conformance",
]

# CI runs a fixed set of examples (the same on every run); developers get fresh
# random ones, which is how the equivalence tests find new cases.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
