"""The device plugin manager (pkg/kubelet/cm/devicemanager): plugins register
on <root-dir>/device-plugins/kubelet.sock, report their devices over
ListAndWatch, and are asked to Allocate devices to containers at admission.
"""

from __future__ import annotations

from kubelet.util.validation import is_qualified_name

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

_REQUESTS_PREFIX = "requests."
_NATIVE_DOMAIN = "kubernetes.io/"


def is_native_resource(name: str) -> bool:
    return "/" not in name or _NATIVE_DOMAIN in name


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: domain-qualified, outside kubernetes.io,
    and still a qualified name once quota's 'requests.' prefix is put on it."""
    if is_native_resource(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return not is_qualified_name(_REQUESTS_PREFIX + name)
