"""Container log rotation (pkg/kubelet/logs upstream)."""
