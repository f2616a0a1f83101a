"""Channel options the kubelet's plugin clients share."""

from __future__ import annotations

# Each channel gets connections of its own, as each grpc-go ClientConn does.
# grpc's default pool would hand a channel to a plugin that re-registered at
# the same socket path the subchannel of the channel before it, still in
# reconnect back-off from the process that went away: its first calls would
# fail at once ("connect failed: No such file or directory").
OWN_CONNECTIONS = ("grpc.use_local_subchannel_pool", 1)
