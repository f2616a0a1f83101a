"""Shared pytest configuration.

Fixture modules for the real parts (simulated runtime, containerd, control
plane) live in tests/fixtures/ and are registered here.
"""

pytest_plugins: list[str] = [
    "tests.fixtures.cluster",
    "tests.fixtures.simruntime",
    "tests.fixtures.containerd",
]
