"""The device plugin manager (pkg/kubelet/cm/devicemanager): plugins register
on <root-dir>/device-plugins/kubelet.sock, report their devices over
ListAndWatch, and are asked to Allocate devices to containers at admission.
"""

from __future__ import annotations

from kubelet.util.validation import is_extended_resource_name

API_VERSION = "v1beta1"
SUPPORTED_VERSIONS = (API_VERSION,)
DEVICE_PLUGINS_DIR = "device-plugins"
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT_NAME = "kubelet_internal_checkpoint"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# How long the devices of a plugin that went away stay in the node's capacity
# (endpointStopGracePeriod): a plugin restarting within it keeps its resource.
STOP_GRACE_PERIOD = 300.0

__all__ = ["is_extended_resource_name"]
