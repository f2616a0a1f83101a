"""Network probes shared by the prober and lifecycle hooks (pkg/probe upstream)."""
