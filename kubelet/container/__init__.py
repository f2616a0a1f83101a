"""Runtime-neutral container types and the pod status cache (pkg/kubelet/container)."""
