"""Harnesses that start real parts (runtimes, control plane) for tests and scripts."""
