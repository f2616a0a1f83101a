"""Command-line entry points (the Go kubelet's cmd/kubelet/app)."""
