"""Node status: machine facts and the setters that build Node.status (pkg/kubelet/nodestatus)."""
