"""Resources the kubelet allocated to its pods (pkg/kubelet/allocation)."""
