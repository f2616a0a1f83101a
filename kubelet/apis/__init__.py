"""Versioned configuration APIs (the Go kubelet's pkg/kubelet/apis)."""
