"""The DRA manager (cm/dra/manager.go upstream): prepares a pod's
ResourceClaims with their drivers before its sandbox is made, hands each
container the CDI devices of the claims it names, and unprepares a claim once
no pod on this node uses it any more.

What it knows of the claims lives in the claim info cache (claiminfo.py),
which it is given: the health handler reads the same cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import grpc

from kubelet.apis.podresources.types import DynamicClaim
from kubelet.checkpointmanager import CheckpointError
from kubelet.client.rest import API_ERRORS, APIClient
from kubelet.cm.dra import claims as cl
from kubelet.cm.dra import metrics as dm
from kubelet.cm.dra import state as st
from kubelet.cm.dra.api import api_pb2 as pb
from kubelet.cm.dra.claiminfo import ClaimInfoCache, claim_devices
from kubelet.cm.dra.plugin import DRAPlugin, DRAPluginManager
from kubelet.cm.interfaces import PodLookup
from kubelet.types import Container, Pod, namespace, uid

log = logging.getLogger(__name__)

RECONCILE_PERIOD = 60.0  # defaultReconcilePeriod


class DRAError(Exception):
    """Preparing or unpreparing a pod's claims failed; the caller retries."""


def _pb_claim(s: st.ClaimInfoState) -> pb.Claim:
    return pb.Claim(namespace=s.namespace, uid=s.claim_uid, name=s.claim_name)


def _observe(operation: str, failed: bool, start: float) -> None:
    is_error = "true" if failed else "false"
    dm.OPERATIONS.labels(operation, is_error).observe(time.perf_counter() - start)


class _Result(Protocol):
    error: str


R = TypeVar("R", bound=_Result)


def _results(
    method: str, batch: list[st.ClaimInfoState], answers: Mapping[str, R]
) -> list[tuple[st.ClaimInfoState, R]]:
    """A driver's answer per claim of the batch; DRAError (upstream's texts)
    for an unknown claim, a claim's error, or a claim left out."""
    by_uid = {s.claim_uid: s for s in batch}
    out = []
    for claim_uid, result in answers.items():
        s = by_uid.get(claim_uid)
        if s is None:
            raise DRAError(f"{method} returned result for unknown claim UID {claim_uid}")
        if result.error:
            raise DRAError(f"{method} failed for ResourceClaim {s.claim_name}: {result.error}")
        out.append((s, result))
    if len(batch) != len(answers):
        raise DRAError(f"{method} skipped {len(batch) - len(answers)} ResourceClaims")
    return out


class DRAManager:
    def __init__(
        self,
        claims: ClaimInfoCache,
        client: APIClient | None,
        plugins: DRAPluginManager,
        pods: PodLookup,
        sources_ready: Callable[[], bool],
        reconcile_period: float = RECONCILE_PERIOD,
    ) -> None:
        self.client = client
        self.plugins = plugins
        self.pods = pods
        self.sources_ready = sources_ready
        self.reconcile_period = reconcile_period
        self.claims = claims

    # ----------------------------------------------------------- prepare
    async def prepare_resources(self, pod: Pod) -> None:
        start, failed = time.perf_counter(), True
        try:
            await self._prepare(pod)
            failed = False
        except (cl.ClaimError, DRAError, CheckpointError, OSError) as err:
            raise DRAError(f"prepare dynamic resources: {err}") from err
        finally:
            _observe("PrepareResources", failed, start)

    async def _fetch(self, pod: Pod, pod_claim: Mapping[str, Any]) -> cl.ResourceClaim | None:
        name, must_own = cl.claim_name(pod, pod_claim)
        if name is None:
            return None
        if self.client is None:
            raise DRAError(f"fetch ResourceClaim {name}: no API server to read it from")
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace(pod), safe='')}"
            f"/resourceclaims/{quote(name, safe='')}"
        )
        try:
            claim: cl.ResourceClaim = await self.client.get(path)
        except API_ERRORS as err:
            raise DRAError(f"fetch ResourceClaim {name}: {err}") from err
        cl.check_claim(pod, claim, must_own)
        return claim

    async def _prepare(self, pod: Pod) -> None:
        infos: list[st.ClaimInfoState] = []
        for pc in cl.pod_claims(pod):
            claim = await self._fetch(pod, pc)
            if claim is None:
                continue
            info = cl.claim_info(claim)
            for driver in info.driver_state:
                self.plugins.get(driver)  # every driver registered, or nothing is called
            infos.append(info)
        if not infos:
            return  # no claim: nothing to record (a write per pod was start-up's hot spot)
        batches: dict[str, list[st.ClaimInfoState]] = {}
        for info in infos:
            have = self.claims.get(info.namespace, info.claim_name)
            if have is None:
                have = self.claims.add(info)
            elif have.state.claim_uid != info.claim_uid:
                raise DRAError(
                    f"old ResourceClaim with same name {info.claim_name} and different UID "
                    f"{have.state.claim_uid} still exists (previous pod force-deleted?!)"
                )
            have.state.pod_uids.add(uid(pod))
            if not have.prepared:
                for driver in have.state.driver_state:
                    batches.setdefault(driver, []).append(have.state)
        # The pod counts on its claims before any driver is called: its
        # termination then unprepares them even if this prepare fails.
        self.claims.checkpoint()
        for driver, batch in sorted(batches.items()):
            await self._prepare_batch(self.plugins.get(driver), batch)
        for batch in batches.values():
            for s in batch:
                entry = self.claims.get(s.namespace, s.claim_name)
                if entry is not None and entry.state is s:  # not unprepared meanwhile
                    entry.prepared = True
        self.claims.checkpoint()

    async def _prepare_batch(self, plugin: DRAPlugin, batch: list[st.ClaimInfoState]) -> None:
        try:
            resp = await plugin.prepare([_pb_claim(s) for s in batch])
        except grpc.aio.AioRpcError as err:
            raise DRAError(f"NodePrepareResources: {err.details() or err.code().name}") from err
        for s, result in _results("NodePrepareResources", batch, resp.claims):
            # One answer carries all of the driver's devices for the claim.
            s.driver_state[plugin.driver] = [
                st.Device(d.pool_name, d.device_name, list(d.request_names) or None,
                          list(d.cdi_device_ids) or None)
                for d in result.devices
            ]  # fmt: skip

    # --------------------------------------------------------- unprepare
    async def unprepare_resources(self, pod: Pod) -> None:
        """After the pod's containers stopped: claims only it used go back."""
        start, failed = time.perf_counter(), True
        try:
            names = cl.pod_claim_names(pod)
            await self._unprepare(uid(pod), namespace(pod), names)
            failed = False
        except (cl.ClaimError, DRAError, CheckpointError, OSError) as err:
            raise DRAError(f"unprepare dynamic resources: {err}") from err
        finally:
            _observe("UnprepareResources", failed, start)

    async def _unprepare(self, pod_uid: str, ns: str, names: list[str]) -> None:
        batches: dict[str, list[st.ClaimInfoState]] = {}
        done: list[str] = []  # claim names
        for name in names:
            info = self.claims.get(ns, name)
            if info is None or pod_uid not in info.state.pod_uids:
                continue
            if len(info.state.pod_uids) > 1:
                info.state.pod_uids.discard(pod_uid)  # another pod still uses it
                continue
            done.append(name)
            for driver in info.state.driver_state:
                batches.setdefault(driver, []).append(info.state)
        for driver, batch in sorted(batches.items()):
            plugin = self.plugins.get(driver)
            try:
                resp = await plugin.unprepare([_pb_claim(s) for s in batch])
            except grpc.aio.AioRpcError as err:
                raise DRAError(
                    f"NodeUnprepareResources: {err.details() or err.code().name}"
                ) from err
            _results("NodeUnprepareResources", batch, resp.claims)
        for name in done:
            self.claims.remove(ns, name)
        self.claims.checkpoint()

    # -------------------------------------------------------- containers
    def container_cdi_devices(self, pod: Pod, c: Container) -> list[str]:
        """GetResources: the CDI device IDs of the claims (and requests) the
        container names, in its order; DRAError when one is not prepared."""
        out: list[str] = []
        try:
            wanted = cl.container_claims(pod, c)
        except cl.ClaimError as err:
            raise DRAError(str(err)) from err
        for name, request in wanted:
            info = self.claims.get(namespace(pod), name)
            if info is None:
                raise DRAError(f"internal error: unable to get claim info for ResourceClaim {name}")
            for dev in cl.cdi_devices(info.state, request):
                if dev not in out:
                    out.append(dev)
        return out

    def dynamic_resources(self, pod: Pod, c: Container) -> list[DynamicClaim]:
        """GetDynamicResources (pod resources API): the claims the container
        names that this node knows, each once, with all their devices."""
        try:
            wanted = cl.container_claims(pod, c)
        except cl.ClaimError:
            return []
        out: list[DynamicClaim] = []
        for name in dict.fromkeys(n for n, _ in wanted):
            info = self.claims.get(namespace(pod), name)
            if info is None:
                continue
            s = info.state
            out.append(DynamicClaim(s.claim_name, s.namespace, claim_devices(s)))
        return out

    # ------------------------------------------------------------- loops
    async def reconcile(self) -> None:
        """Unprepare the claims of pods no longer active (a pod force-deleted,
        or gone while this kubelet was down)."""
        if not self.sources_ready():
            return
        active = {uid(p) for p in self.pods.active_pods()}
        stale: dict[str, tuple[str, list[str]]] = {}
        for info in list(self.claims):
            for pod_uid in sorted(info.state.pod_uids - active):
                entry = stale.setdefault(pod_uid, (info.state.namespace, []))
                entry[1].append(info.state.claim_name)
        for pod_uid, (ns, names) in stale.items():
            try:
                await self._unprepare(pod_uid, ns, names)
            except (cl.ClaimError, DRAError, CheckpointError, OSError) as err:
                log.info("Unpreparing resources of pod %s in the reconcile loop failed, "
                         "will retry: %s", pod_uid, err)  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Startup ResourceSlice wipe, then the reconcile loop, until stop."""
        wipe = asyncio.ensure_future(self.plugins.wipe_slices())
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), self.reconcile_period)
                except TimeoutError:
                    await self.reconcile()
        finally:
            wipe.cancel()
            await asyncio.gather(wipe, return_exceptions=True)
            await self.plugins.close()
