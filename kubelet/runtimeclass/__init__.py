"""RuntimeClass lookups (pkg/kubelet/runtimeclass upstream)."""
