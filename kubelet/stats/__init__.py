"""Node and container statistics (cgroup and /proc parsing)."""
