"""The container manager: the node's cgroup tree for pods (pkg/kubelet/cm)."""
