"""The service-account token manager on a fake clock and a fake TokenRequest API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubelet.client.rest import APIError
from kubelet.token import BoundObjectRef, TokenManager, TokenRequestSpec
from kubelet.util.clock import FakeClock
from tests.unit.volume.helpers import FakeTokenAPI


def spec(uid: str = "uid-1", exp: int = 3600, aud: tuple[str, ...] = ()) -> TokenRequestSpec:
    return TokenRequestSpec(
        audiences=aud, expiration_seconds=exp, bound_object_ref=BoundObjectRef("pod-1", uid)
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_800_000_000.0)


def make(clock: FakeClock, api: FakeTokenAPI | None, jitter: float = 0.0) -> TokenManager:
    return TokenManager(api, clock=clock, jitter=lambda: jitter)  # type: ignore[arg-type]


async def test_request_is_bound_to_the_pod(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    tok = await m.get_service_account_token("ns", "sa", spec(aud=("vault",), exp=7200))
    assert tok.token == "token-1"
    path, body = api.requests[0]
    assert path == "/api/v1/namespaces/ns/serviceaccounts/sa/token"
    assert body == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": ["vault"],
            "expirationSeconds": 7200,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "pod-1", "uid": "uid-1"},
        },
    }
    assert tok.expiration == clock.time() + 7200


async def test_cached_until_80_percent_then_refreshed(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    first = await m.get_service_account_token("ns", "sa", spec())
    clock.step(0.8 * 3600 - 1)
    assert await m.get_service_account_token("ns", "sa", spec()) is first
    assert len(api.requests) == 1
    clock.step(2)
    second = await m.get_service_account_token("ns", "sa", spec())
    assert second.token == "token-2" and len(api.requests) == 2
    assert await m.get_service_account_token("ns", "sa", spec()) is second


async def test_jitter_brings_refresh_forward(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api, jitter=9)
    await m.get_service_account_token("ns", "sa", spec())
    clock.step(0.8 * 3600 - 8)
    await m.get_service_account_token("ns", "sa", spec())
    assert len(api.requests) == 2


async def test_refresh_after_24h_for_long_tokens(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    year = 365 * 24 * 3600
    await m.get_service_account_token("ns", "sa", spec(exp=year))
    clock.step(24 * 3600 - 1)
    await m.get_service_account_token("ns", "sa", spec(exp=year))
    assert len(api.requests) == 1
    clock.step(2)
    await m.get_service_account_token("ns", "sa", spec(exp=year))
    assert len(api.requests) == 2


async def test_granted_lifetime_decides(clock: FakeClock) -> None:
    # Asked for 3600 s, granted 600 s: refreshed at 480 s.
    api = FakeTokenAPI(clock, grant=600)
    m = make(clock, api)
    await m.get_service_account_token("ns", "sa", spec())
    clock.step(481)
    await m.get_service_account_token("ns", "sa", spec())
    assert len(api.requests) == 2


async def test_keys_separate_audience_expiration_and_pod(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    for s in (spec(), spec(aud=("a",)), spec(exp=7200), spec(uid="uid-2")):
        await m.get_service_account_token("ns", "sa", s)
    await m.get_service_account_token("ns", "other-sa", spec())
    await m.get_service_account_token("ns2", "sa", spec())
    assert len(api.requests) == 6 and len(m) == 6
    await m.get_service_account_token("ns", "sa", spec(aud=("a",)))
    assert len(api.requests) == 6


async def test_failed_refresh_keeps_valid_token_then_errors(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    first = await m.get_service_account_token("ns", "sa", spec())
    api.fail = APIError(500, "InternalError", "etcd is down")
    clock.step(3000)
    assert await m.get_service_account_token("ns", "sa", spec()) is first
    clock.step(700)  # past expiration
    with pytest.raises(RuntimeError, match=r"expired and refresh failed: 500 InternalError"):
        await m.get_service_account_token("ns", "sa", spec())


async def test_first_fetch_failure(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    api.fail = APIError(403, "Forbidden", "no relationship found between node and this pod")
    m = make(clock, api)
    with pytest.raises(
        RuntimeError, match=r"^failed to fetch token: 403 Forbidden: no relationship"
    ):
        await m.get_service_account_token("ns", "sa", spec())


async def test_standalone(clock: FakeClock) -> None:
    m = make(clock, None)
    with pytest.raises(
        RuntimeError, match=r"cannot use TokenManager when kubelet is in standalone"
    ):
        await m.get_service_account_token("ns", "sa", spec())


async def test_deleted_pod_tokens_dropped_and_expired_collected(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    m = make(clock, api)
    await m.get_service_account_token("ns", "sa", spec(uid="a"))
    await m.get_service_account_token("ns", "sa", spec(uid="a", aud=("x",)))
    await m.get_service_account_token("ns", "sa", spec(uid="b", exp=600))
    await m.get_service_account_token("ns", "sa", spec(uid="c", exp=7200))
    m.delete_service_account_token("a")
    assert len(m) == 2
    clock.step(601)  # b expired; the next call's GC drops it
    m.cleanup()
    assert len(m) == 1


async def test_concurrent_requests_share_one_call(clock: FakeClock) -> None:
    api = FakeTokenAPI(clock)
    api.delay = 0.02
    m = make(clock, api)
    toks = await asyncio.gather(
        *(m.get_service_account_token("ns", "sa", spec()) for _ in range(20))
    )
    assert len(api.requests) == 1 and {t.token for t in toks} == {"token-1"}


async def test_a_pod_the_api_server_does_not_know_yet_is_asked_for_again_soon(
    clock: FakeClock,
) -> None:
    """NodeRestriction answers 404 for a bound pod its cache has not seen yet."""

    class Lagging(FakeTokenAPI):
        misses = 2

        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            if self.misses:
                self.misses -= 1
                self.requests.append((path, body))
                raise APIError(404, "NotFound", 'pods "pod-1" not found')
            return await super().create(path, body)

    api = Lagging(clock)
    m = TokenManager(api, clock=clock, jitter=lambda: 0.0, not_found_retries=(0, 0, 0))  # type: ignore[arg-type]
    assert (await m.get_service_account_token("ns", "sa", spec())).token == "token-3"
    # A missing service account is not retried: it will not appear by waiting.
    api2 = FakeTokenAPI(clock)
    api2.fail = APIError(404, "NotFound", 'serviceaccounts "sa" not found')
    m2 = TokenManager(api2, clock=clock, jitter=lambda: 0.0, not_found_retries=(0, 0, 0))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="serviceaccounts"):
        await m2.get_service_account_token("ns", "sa", spec())
    assert len(api2.requests) == 1


async def test_token_requests_in_flight_are_capped(clock: FakeClock) -> None:
    """A thousand new pods must not take every API connection from status patches."""

    class Counting(FakeTokenAPI):
        now = peak = 0

        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            self.now += 1
            self.peak = max(self.peak, self.now)
            await asyncio.sleep(0.001)
            self.now -= 1
            return await super().create(path, body)

    api = Counting(clock)
    m = TokenManager(api, clock=clock, jitter=lambda: 0.0, max_inflight=4)  # type: ignore[arg-type]
    await asyncio.gather(
        *(m.get_service_account_token("ns", "sa", spec(uid=f"u{i}")) for i in range(40))
    )
    assert len(api.requests) == 40 and api.peak == 4
