"""What the kubelet knows of its container runtime: whether it is up, its
name and version, the node's images (pkg/kubelet/runtime.go and
updateRuntimeUp in kubelet.go)."""

from __future__ import annotations

import asyncio
import logging

import orjson

from kubelet.core_v1 import NodeFeatures
from kubelet.cri import errors
from kubelet.cri.api import api_pb2 as pb
from kubelet.cri.types import ImageService, RuntimeService
from kubelet.types import ContainerImage, NodeRuntimeHandler
from kubelet.util.clock import Clock

log = logging.getLogger(__name__)

# maxWaitForContainerRuntime: no passed runtime check for this long = runtime down.
RUNTIME_DOWN_AFTER = 30.0
STATUS_PERIOD = 5.0
IMAGES_EVERY = 6  # status rounds: the image list is refreshed every 30 s


class RuntimeState:
    def __init__(self, runtime: RuntimeService, images: ImageService, clock: Clock) -> None:
        self.runtime = runtime
        self.images = images
        self.clock = clock
        # The node's images for the Node status, biggest first.
        self.node_images: list[ContainerImage] = []
        self.runtime_version = ""
        self._name = "cri"  # until the runtime answers Version
        self.error: str | None = "container runtime status check may not have completed yet"
        self._synced: float | None = None  # clock.monotonic() of the last passed check
        # Handler name -> its user namespace support, from the last Status
        # (empty: the runtime named no handlers, or has not answered yet).
        self.userns_handlers: dict[str, bool] = {}
        self.node_runtime_handlers: list[NodeRuntimeHandler] = []
        # Node.status.features (the NodeFeatures setter): None until a status
        # answer carries the runtime's features (an old runtime never does).
        self.node_features: NodeFeatures | None = None

    async def wait_for_version(self, stop: asyncio.Event) -> pb.VersionResponse | None:
        """Ask the runtime its version until it answers (10 minutes at most) or
        stop is set; None when it never did."""
        for _ in range(600):
            try:
                v = await self.runtime.version()
            except errors.CRIError as err:  # not up yet: ask again
                log.warning("Container runtime not answering yet: %s", err)
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                    return None
                except TimeoutError:
                    continue
            self.runtime_version = f"{v.runtime_name}://{v.runtime_version}"
            self._name = v.runtime_name or "cri"
            log.info(
                "Container runtime %s %s (CRI %s)",
                v.runtime_name,
                v.runtime_version,
                v.runtime_api_version,
            )
            return v
        return None

    def runtime_name(self) -> str:
        """The runtime's name in container IDs (kuberuntime's RuntimeIdentity)."""
        return self._name

    async def sandbox_image(self) -> str:
        """The pause image the runtime uses (containerd reports it in its verbose
        status config), so image GC never removes it: containerd 1.6 does not
        mark it pinned, and without a registry it could not be pulled back."""
        try:
            info = (await self.runtime.status(verbose=True)).info
            return str(orjson.loads(info.get("config", "{}")).get("sandboxImage", ""))
        except (errors.CRIError, ValueError, AttributeError) as err:  # no JSON, or not an object
            # Best effort: image GC then keeps only what the runtime pins.
            log.warning("Could not learn the runtime's sandbox image: %s", err)
            return ""

    async def run(self, stop: asyncio.Event) -> None:
        """updateRuntimeUp: every 5 s, ask the runtime whether it is ready; the
        image list is refreshed every 30 s."""
        rounds = 0
        while not stop.is_set():
            try:
                if rounds % IMAGES_EVERY == 0:
                    await self._refresh_images()
                await self.check()
            except Exception:  # the node's readiness depends on this loop: it goes on
                log.exception(
                    "Container runtime status round failed; next round in %ss", STATUS_PERIOD
                )
            rounds += 1
            try:
                await asyncio.wait_for(stop.wait(), STATUS_PERIOD)
            except TimeoutError:
                pass

    async def check(self) -> None:
        try:
            st = await self.runtime.status()
        except errors.CRIError as err:
            # As upstream's runtimeState: one failed check is logged; the node
            # turns NotReady only once no check has passed for 30 s, so a
            # runtime restart of a few seconds does not flap it.
            log.error("Container runtime sanity check failed: %s", err)
            last = self._synced
            if last is not None and self.clock.monotonic() - last >= RUNTIME_DOWN_AFTER:
                self.error = f"container runtime is down: {err}"
            return
        bad = [
            f"{c.type}={c.status} ({c.reason}: {c.message})"
            for c in st.status.conditions
            if c.type in ("RuntimeReady", "NetworkReady") and not c.status
        ]
        self.error = "container runtime is not ready: " + ", ".join(bad) if bad else None
        self._synced = self.clock.monotonic()
        self.userns_handlers = {
            h.name: h.HasField("features") and h.features.user_namespaces
            for h in st.runtime_handlers
        }
        self.node_features = (
            {"supplementalGroupsPolicy": st.features.supplemental_groups_policy}
            if st.HasField("features")
            else None
        )
        # Node.status.runtimeHandlers (upstream's RuntimeHandlers setter).
        self.node_runtime_handlers = [
            {
                "name": h.name,
                "features": {
                    "recursiveReadOnlyMounts": h.features.recursive_read_only_mounts,
                    "userNamespaces": h.features.user_namespaces,
                },
            }
            for h in st.runtime_handlers
        ]

    def handler_supports_user_namespaces(self, handler: str) -> bool:
        """HandlerSupportsUserNamespaces: a runtime that names no handlers (an
        old one) supports none; a handler it does not name is an error."""
        if not self.userns_handlers:
            return False
        if handler not in self.userns_handlers:
            raise LookupError(handler)
        return self.userns_handlers[handler]

    def handler_supports_recursive_read_only(self, handler: str) -> bool:
        """runtimeHandlerSupportsRecursiveReadOnlyMounts: a runtime that names
        no handlers supports none; a handler it does not name is logged."""
        for h in self.node_runtime_handlers:
            if h["name"] == handler:
                return bool(h["features"]["recursiveReadOnlyMounts"])
        if self.node_runtime_handlers:
            log.error("Unknown runtime handler %r", handler)
        return False

    async def _refresh_images(self) -> None:
        """The node's image list for the Node status, biggest first (as upstream)."""
        try:
            images = await self.images.list_images()
        except errors.CRIError as err:  # the list stays as it was until the next round
            log.debug("listing images failed: %s", err)
            return
        sized = []
        for im in images:
            names = [*im.repo_digests, *im.repo_tags]
            if names:
                sized.append((int(im.size), names))
        sized.sort(key=lambda x: -x[0])
        self.node_images = [{"names": n, "sizeBytes": size} for size, n in sized]
