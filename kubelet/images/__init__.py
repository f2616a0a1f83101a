"""Image garbage collection (pkg/kubelet/images upstream)."""
