"""Graceful node shutdown (pkg/kubelet/nodeshutdown upstream): a logind delay
inhibitor lock taken over the D-Bus system bus, and on PrepareForShutdown the
node's pods stopped in priority groups before the lock is let go."""
