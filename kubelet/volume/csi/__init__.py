"""CSI volumes (pkg/volume/csi upstream): the kubelet's side of the Container
Storage Interface.

- drivers.py: the CSI plugin handler of the plugin manager (driver
  registration, NodeGetInfo -> CSINode and the node's topology labels).
- client.py: the Node and Identity services over the driver's socket.
- plugin.py: the volume plugin (inline `csi` volumes and PVs with a `csi`
  source), staging.py the per-volume global mount shared by pods, attach.py
  the wait for the attach-detach controller's VolumeAttachment.
- paths.py: the on-disk layout, as upstream lays it out, so a kubelet
  restarted (or swapped for the Go one) finds every mount again.
"""

from __future__ import annotations

import re

PLUGIN_NAME = "kubernetes.io/csi"

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def validate_driver_name(name: str) -> str | None:
    """Why `name` is not a valid CSI driver name (ValidateCSIDriverName: at
    most 63 characters, a DNS-1123 subdomain once lowercased), or None. A
    driver name becomes a directory name under plugins/kubernetes.io/csi, so
    nothing else may pass."""
    if not name:
        return "CSI driver name must not be empty"
    if len(name) > 63:
        return f"CSI driver name {name!r} is longer than 63 characters"
    if not _DNS1123_SUBDOMAIN.match(name.lower()):
        return f"CSI driver name {name!r} is not a DNS-1123 subdomain"
    return None
