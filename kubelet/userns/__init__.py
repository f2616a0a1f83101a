"""User namespaces for pods (`hostUsers: false`, KEP-127; pkg/kubelet/userns)."""
