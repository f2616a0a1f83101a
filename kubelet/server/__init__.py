"""The kubelet's HTTP servers (pkg/kubelet/server): kubelet port (TLS), read-only port, healthz."""
