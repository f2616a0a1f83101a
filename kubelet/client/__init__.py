"""API server clients (the kubelet's three: main, events, heartbeat)."""
