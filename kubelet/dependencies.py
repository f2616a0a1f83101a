"""The kubelet's injected dependencies (the Go kubelet's kubelet.Dependencies).

Every field left as None is built by run() from the configuration; tests put
fakes in its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Dependencies:
    # API clients (cluster mode): the main client, the event client and the
    # heartbeat client, as upstream. None in standalone mode.
    kube_client: Any = None
    event_client: Any = None
    heartbeat_client: Any = None
    # CRI services (kubelet.cri.types.RuntimeService / ImageService).
    runtime_service: Any = None
    image_service: Any = None
    # Node-level collaborators.
    stats_provider: Any = None
    container_manager: Any = None
    oom_adjuster: Any = None
    mounter: Any = None
    volume_plugins: list[Any] = field(default_factory=list)
    # Kubelet server security: authenticator/authorizer and TLS options
    # (kubelet.server.auth.ServerAuth, kubelet.server.tls.TLSOptions).
    auth: Any = None
    tls_options: Any = None
    recorder: Any = None
