"""Pure steps of claim handling (k8s.io/dynamic-resource-allocation/resourceclaim
and cm/dra/claiminfo upstream): which ResourceClaim a pod's entry names,
whether this pod may use it, and which CDI devices a container gets.

Everything here reads API objects as they came (cluster-controlled); names
that end up in a request or the checkpoint are checked as DNS names first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubelet.cm.dra.state import ClaimInfoState
from kubelet.types import Container, Pod, name, namespace, uid
from kubelet.util.validation import is_dns1123_subdomain

ResourceClaim = Mapping[str, Any]  # resource.k8s.io/v1 ResourceClaim, as JSON


class ClaimError(Exception):
    """The pod's claims cannot be prepared (yet); the sync fails and retries."""


def claim_name(pod: Pod, pod_claim: Mapping[str, Any]) -> tuple[str | None, bool]:
    """resourceclaim.Name: (the claim's name or None when none is needed,
    must the claim be owned by the pod)."""
    direct = pod_claim.get("resourceClaimName")
    if direct:
        return _checked(direct), False
    if pod_claim.get("resourceClaimTemplateName"):
        raw: Mapping[str, Any] = pod
        for st in (raw.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("name") == pod_claim.get("name"):
                made = st.get("resourceClaimName")
                return (_checked(made) if made else None), True
        raise ClaimError(f'pod "{namespace(pod)}/{name(pod)}": ResourceClaim not created yet')
    raise ClaimError(
        f'pod "{namespace(pod)}/{name(pod)}", spec.resourceClaim "{pod_claim.get("name")}": '
        "none of the supported fields are set"
    )


def valid_name(v: object) -> bool:
    """A DNS subdomain (what ResourceClaim and driver names must be)."""
    return isinstance(v, str) and not is_dns1123_subdomain(v)


def _checked(claim: object) -> str:
    if not isinstance(claim, str) or not valid_name(claim):
        raise ClaimError(f"invalid ResourceClaim name {claim!r}")
    return claim


def pod_claims(pod: Pod) -> list[Mapping[str, Any]]:
    spec: Mapping[str, Any] = pod["spec"]
    return list(spec.get("resourceClaims") or [])


def pod_claim_names(pod: Pod) -> list[str]:
    """The names of the claims the pod uses (skipping entries needing none);
    ClaimError when one cannot be told yet."""
    out = []
    for pc in pod_claims(pod):
        n, _ = claim_name(pod, pc)
        if n is not None:
            out.append(n)
    return out


def check_claim(pod: Pod, claim: ResourceClaim, must_own: bool) -> None:
    """IsForPod (for claims made from a template) and IsReservedForPod."""
    meta = claim.get("metadata", {})
    cname = meta.get("name", "")
    if must_own:
        owned = any(
            o.get("controller") and o.get("uid") == uid(pod)
            for o in meta.get("ownerReferences") or []
        )
        if meta.get("namespace") != namespace(pod) or not owned:
            raise ClaimError(
                f"ResourceClaim {meta.get('namespace')}/{cname} was not created for pod "
                f"{namespace(pod)}/{name(pod)} (pod is not owner)"
            )
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    if not any(r.get("uid") == uid(pod) for r in reserved):
        raise ClaimError(
            f"pod {name(pod)} ({uid(pod)}) is not allowed to use ResourceClaim "
            f"{cname} ({meta.get('uid', '')})"
        )


def claim_info(claim: ResourceClaim) -> ClaimInfoState:
    """newClaimInfoFromClaim: one driver entry per driver of the allocation."""
    meta = claim.get("metadata", {})
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"ResourceClaim {meta.get('name')}: not allocated")
    drivers: dict[str, None] = {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        driver = result.get("driver")
        if not isinstance(driver, str) or not valid_name(driver):
            raise ClaimError(f"ResourceClaim {meta.get('name')}: invalid driver name {driver!r}")
        drivers[driver] = None
    return ClaimInfoState(
        claim_uid=meta.get("uid", ""),
        claim_name=_checked(meta.get("name")),
        namespace=meta.get("namespace", ""),
        driver_state=dict(drivers),
    )


def cdi_devices(info: ClaimInfoState, request: str) -> list[str]:
    """cdiDevicesAsList: the CDI IDs of the claim's devices for one request
    (all of them for ""); a device naming no request serves every request.
    Drivers in name order (upstream walks a map: any order is valid)."""
    out: list[str] = []
    for driver in sorted(info.driver_state):
        for d in info.driver_state[driver] or []:
            if not request or not d.request_names or request in d.request_names:
                out.extend(d.cdi_device_ids or [])
    return out


def container_claim_refs(pod: Pod, c: Container) -> list[tuple[str, str, str]]:
    """(reference, request, claim name) for each of the container's
    resources.claims: the pod claim it names, resolved through the pod's
    spec.resourceClaims (pod entries needing no claim are skipped), in the
    order of those; ClaimError when a claim cannot be told yet."""
    wanted = (c.get("resources") or {}).get("claims") or []
    if not wanted:
        return []
    out = []
    for pc in pod_claims(pod):
        n, _ = claim_name(pod, pc)
        if n is None:
            continue
        ref = pc.get("name")
        out += [(ref, w.get("request") or "", n) for w in wanted if w.get("name") == ref]
    return out


def container_claims(pod: Pod, c: Container) -> list[tuple[str, str]]:
    """(claim name, request) for each of the container's resources.claims
    (container_claim_refs without the references)."""
    return [(n, request) for _, request, n in container_claim_refs(pod, c)]
