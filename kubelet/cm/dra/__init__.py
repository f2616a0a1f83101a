"""Dynamic Resource Allocation (pkg/kubelet/cm/dra upstream): see manager.py."""
