"""The CRI-backed runtime manager (pkg/kubelet/kuberuntime)."""
