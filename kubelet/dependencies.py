"""The kubelet's injected dependencies (the Go kubelet's kubelet.Dependencies).

Every field left as None is built by run() from the configuration; tests put
fakes in its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubelet.cm.container_manager import HostPaths

if TYPE_CHECKING:
    from kubelet.client.rest import APIClient
    from kubelet.cm.container_manager import ContainerManager
    from kubelet.cri.types import ImageService, RuntimeService
    from kubelet.events import EventRecorder
    from kubelet.server.auth import ServerAuth
    from kubelet.server.tls import TLSOptions
    from kubelet.util.oom import OOMAdjuster


@dataclass
class Dependencies:
    # API clients (cluster mode): the main client, the event client and the
    # heartbeat client, as upstream. None in standalone mode.
    kube_client: APIClient | None = None
    event_client: APIClient | None = None
    heartbeat_client: APIClient | None = None
    # CRI services.
    runtime_service: RuntimeService | None = None
    image_service: ImageService | None = None
    oom_adjuster: OOMAdjuster | None = None
    # Kubelet server security: authenticator/authorizer and TLS options.
    auth: ServerAuth | None = None
    tls_options: TLSOptions | None = None
    recorder: EventRecorder | None = None
    # The node-level container manager (swap, kernel tunables, node allocatable
    # cgroups, system containers), and the host paths it reads and writes.
    container_manager: ContainerManager | None = None
    host_paths: HostPaths = field(default_factory=HostPaths)
