"""Service-account tokens from the TokenRequest API, cached and refreshed
(pkg/kubelet/token/token_manager.go upstream).

A token is requested with the node's credentials and bound to its pod
(boundObjectRef kind Pod, name, uid): NodeRestriction lets a node ask only for
pods bound to it, and the token dies with the pod. Tokens are cached per
(namespace, service account, audiences, expirationSeconds, bound object) and
asked again once older than 80 % of their lifetime or 24 h, minus a jitter of
up to 10 s so that the pods of a node do not all refresh in the same second.
A refresh that fails keeps the old token while it is still valid.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet.client.rest import API_ERRORS, APIClient, APIError
from kubelet.util.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

# A request that failed: the API's answer or the connection, or an answer
# without a token (RuntimeError).
_FETCH_ERRORS: tuple[type[Exception], ...] = (RuntimeError, *API_ERRORS)

MAX_TTL = 24 * 3600.0
GC_PERIOD = 60.0
MAX_JITTER = 10.0


@dataclass(frozen=True)
class BoundObjectRef:
    name: str
    uid: str
    kind: str = "Pod"
    api_version: str = "v1"


@dataclass(frozen=True)
class TokenRequestSpec:
    """What is asked for (spec of an authentication.k8s.io/v1 TokenRequest)."""

    audiences: tuple[str, ...] = ()
    expiration_seconds: int | None = None
    bound_object_ref: BoundObjectRef | None = None

    def to_api(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        if self.expiration_seconds is not None:
            spec["expirationSeconds"] = self.expiration_seconds
        ref = self.bound_object_ref
        if ref is not None:
            spec["boundObjectRef"] = {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "uid": ref.uid,
            }
        return spec


@dataclass(frozen=True)
class ServiceAccountToken:
    token: str
    expiration: float  # status.expirationTimestamp, seconds since the epoch
    # spec.expirationSeconds as granted (the server may change what was asked)
    expiration_seconds: int | None
    spec: TokenRequestSpec  # as asked: the cache key


_Key = tuple[str, str, TokenRequestSpec]


def _key_text(key: _Key) -> str:
    # Safe to log: no token in it.
    ns, name, spec = key
    ref = spec.bound_object_ref
    bound = f"{ref.kind}/{ref.name}/{ref.uid}" if ref else ""
    return f'"{name}"/"{ns}"/{list(spec.audiences)}/{spec.expiration_seconds or 0}/{bound}'


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# Token requests in flight at once, and the pauses before asking again when the
# API server does not know the bound pod yet.
MAX_INFLIGHT = 16
NOT_FOUND_RETRIES = (0.05, 0.1, 0.2, 0.4)


class TokenManager:
    def __init__(
        self,
        client: APIClient | None,
        clock: Clock = REAL_CLOCK,
        jitter: Callable[[], float] | None = None,
        max_inflight: int = MAX_INFLIGHT,
        not_found_retries: tuple[float, ...] = NOT_FOUND_RETRIES,
    ) -> None:
        self.client = client
        self.clock = clock
        # Token requests share the API client's connections with status patches:
        # a thousand new pods must not take them all (measured: patches stalled
        # at 10/s while 96 token requests were in flight).
        self._slots = asyncio.Semaphore(max_inflight)
        self._not_found_retries = not_found_retries
        # Whole seconds in [0, 10), as upstream.
        self._jitter = jitter or (lambda: float(int(random.random() * MAX_JITTER)))
        self._cache: dict[_Key, ServiceAccountToken] = {}
        # One request per key at a time: concurrent set_ups of one volume share it.
        self._inflight: dict[_Key, asyncio.Future[ServiceAccountToken]] = {}
        self._last_gc = clock.monotonic()
        self.requests = 0

    async def get_service_account_token(
        self, namespace: str, name: str, spec: TokenRequestSpec
    ) -> ServiceAccountToken:
        """A valid token for the service account `name`; raises an Exception
        whose message is fit for a FailedMount event."""
        key: _Key = (namespace, name, spec)
        try:
            return await self._get(key)
        finally:
            # After the lookup: an expired token of this key says so in the error.
            self._maybe_gc()

    async def _get(self, key: _Key) -> ServiceAccountToken:
        namespace, name, spec = key
        cached = self._cache.get(key)
        if cached is not None and not self.requires_refresh(cached):
            return cached
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._request(namespace, name, spec))
            self._inflight[key] = pending
            pending.add_done_callback(lambda f: self._done(key, f))
        try:
            token = await asyncio.shield(pending)
        except _FETCH_ERRORS as err:
            cached = self._cache.get(key)
            if cached is None:
                raise RuntimeError(f"failed to fetch token: {err}") from err
            if self._expired(cached):
                raise RuntimeError(
                    f"token {_key_text(key)} expired and refresh failed: {err}"
                ) from err
            log.error("couldn't update token %s: %s", _key_text(key), err)
            return cached
        self._cache[key] = token
        return token

    def _done(self, key: _Key, fut: asyncio.Future[ServiceAccountToken]) -> None:
        self._inflight.pop(key, None)
        if not fut.cancelled():
            fut.exception()  # retrieved here too, in case every waiter was cancelled

    async def _request(
        self, namespace: str, name: str, spec: TokenRequestSpec
    ) -> ServiceAccountToken:
        if self.client is None:
            raise RuntimeError("cannot use TokenManager when kubelet is in standalone mode")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec.to_api(),
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        async with self._slots:
            for delay in (*self._not_found_retries, None):
                self.requests += 1
                try:
                    doc = await self.client.create(path, body)
                    break
                except APIError as err:
                    # NodeRestriction looks the bound pod up in the API server's
                    # cache, which can lag the watch that brought us the pod: a
                    # brand-new pod is "not found" for a moment. Ask again soon
                    # rather than through the volume's 0.5 s, 1 s ... back-off.
                    pod_missing = err.not_found and (
                        'pod "' in err.message or 'pods "' in err.message
                    )
                    if delay is None or not pod_missing:
                        raise
                    await asyncio.sleep(delay)
        status = (doc or {}).get("status") or {}
        token = status.get("token")
        stamp = status.get("expirationTimestamp")
        if not token or not stamp:
            raise RuntimeError("the TokenRequest answer has no token or expirationTimestamp")
        granted = ((doc or {}).get("spec") or {}).get("expirationSeconds")
        return ServiceAccountToken(
            token=str(token),
            expiration=_parse_time(str(stamp)),
            expiration_seconds=int(granted) if granted is not None else None,
            spec=spec,
        )

    def requires_refresh(self, tok: ServiceAccountToken) -> bool:
        """Older than 80 % of its lifetime or than 24 h (jittered), as upstream's
        requiresRefresh."""
        if tok.expiration_seconds is None:
            log.error("token request answer without expirationSeconds: never refreshed")
            return False
        now = self.clock.time()
        issued = tok.expiration - tok.expiration_seconds
        jitter = self._jitter()
        if now > issued + MAX_TTL - jitter:
            return True
        # Integer seconds, as upstream computes 20 % of the lifetime.
        return now > tok.expiration - (tok.expiration_seconds * 20) // 100 - jitter

    def _expired(self, tok: ServiceAccountToken) -> bool:
        return self.clock.time() > tok.expiration

    def delete_service_account_token(self, pod_uid: str) -> None:
        """Forget every token bound to the pod (its volumes are torn down)."""
        for key in [
            k for k in self._cache if k[2].bound_object_ref and k[2].bound_object_ref.uid == pod_uid
        ]:
            del self._cache[key]

    def cleanup(self) -> None:
        """Drop expired tokens (upstream runs this every minute)."""
        for key in [k for k, t in self._cache.items() if self._expired(t)]:
            del self._cache[key]

    def _maybe_gc(self) -> None:
        now = self.clock.monotonic()
        if now - self._last_gc >= GC_PERIOD:
            self._last_gc = now
            self.cleanup()

    def __len__(self) -> int:
        return len(self._cache)
