"""A simulated CRI runtime: a real runtime.v1 gRPC server with no real processes.

It keeps sandboxes, containers and images in memory with the state machine a
real runtime has (state is lost when it stops), writes container logs in the
CRI format, streams container events, and answers List calls from a cache of
serialized responses so 10,000 pods cost little. See behavior.py for how a
container's command decides what it does.
"""
