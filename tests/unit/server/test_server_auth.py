"""Authentication and authorization on the kubelet port against a fake API
server that counts its TokenReviews and SubjectAccessReviews: invalid tokens
get 401, a flood of random tokens stays bounded, the caches behave as
upstream's, and SubjectAccessReviews carry the whole user."""

from __future__ import annotations

import asyncio
import gc
import secrets
import tracemalloc
from collections.abc import Callable
from typing import Any

import aiohttp

from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.server.authcache import MAX_INFLIGHT, MAX_WAITING, TOKEN_CACHE_SIZE

ALICE = {
    "username": "alice",
    "uid": "u-123",
    "groups": ["devs", "system:authenticated"],
    "extra": {"scopes": ["view", "exec"]},
}


class FakeAPI:
    """TokenReview: tokens in `valid` are users; SubjectAccessReview: `allow(spec)`."""

    def __init__(
        self, allow: Callable[[dict[str, Any]], bool] = lambda _: True, delay: float = 0.002
    ) -> None:
        self.valid = {"good-token": ALICE}
        self.allow = allow
        self.delay = delay
        self.reviewed: list[str] = []
        self.sars: list[dict[str, Any]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.fail = False

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise OSError("connection refused")
        if path.endswith("/subjectaccessreviews"):
            self.sars.append(obj["spec"])
            return {"status": {"allowed": self.allow(obj["spec"])}}
        assert path.endswith("/tokenreviews")
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.inflight -= 1
        token = obj["spec"]["token"]
        self.reviewed.append(token)
        user = self.valid.get(token)
        return {"status": {"authenticated": user is not None, "user": user or {}}}


def make_auth(api: FakeAPI, **kw: Any) -> ServerAuth:
    opts: dict[str, Any] = {
        "anonymous_enabled": True,
        "authorization_mode": "Webhook",
        "client": api,
        "node_name": "node-a",
        "webhook_authn": True,
    }
    return ServerAuth(**(opts | kw))


async def serve(auth: ServerAuth) -> tuple[Any, str]:
    runner = await s.serve(s.kubelet_app(lambda: s.NoPods(), dict, [], auth), "127.0.0.1", 0)
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def get(http: aiohttp.ClientSession, url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.get(url, headers=headers) as r:
        return r.status, await r.text()


async def test_an_invalid_bearer_token_is_refused_not_anonymous() -> None:
    api = FakeAPI()
    runner, base = await serve(make_auth(api, authorization_mode="AlwaysAllow"))
    try:
        async with aiohttp.ClientSession() as http:
            assert (await get(http, base + "/pods"))[0] == 200  # anonymous
            assert (await get(http, base + "/pods", "good-token"))[0] == 200
            assert await get(http, base + "/pods", "forged") == (401, "Unauthorized")
            api.fail = True  # a review that cannot be made is a 401 too
            assert (await get(http, base + "/pods", "other"))[0] == 401
    finally:
        await runner.cleanup()


async def test_a_flood_of_random_tokens_is_reviewed_once_each_with_bounded_concurrency() -> None:
    api = FakeAPI()
    runner, base = await serve(make_auth(api))
    tokens = [secrets.token_urlsafe(24) for _ in range(3000)]
    try:
        conn = aiohttp.TCPConnector(limit=200)
        async with aiohttp.ClientSession(connector=conn) as http:
            codes = await asyncio.gather(*(get(http, base + "/pods", t) for t in tokens))
            assert {c for c, _ in codes} == {401}
            assert len(api.reviewed) == len(tokens)  # one review per distinct token
            assert api.max_inflight <= MAX_INFLIGHT
            # Failed reviews are cached: the same flood again costs nothing.
            await asyncio.gather(*(get(http, base + "/pods", t) for t in tokens))
            assert len(api.reviewed) == len(tokens)
            # Concurrent requests with one new token share one review.
            await asyncio.gather(*(get(http, base + "/pods", "same") for _ in range(100)))
            assert api.reviewed.count("same") == 1
    finally:
        await runner.cleanup()


async def test_reviews_waiting_past_the_bound_fail_at_once() -> None:
    api = FakeAPI(delay=0.05)
    auth = make_auth(api)
    burst = [secrets.token_urlsafe(24) for _ in range(MAX_WAITING * 3)]
    users = await asyncio.gather(*(auth.authenticate(None, f"Bearer {t}") for t in burst))
    assert users == [None] * len(burst)
    assert len(api.reviewed) <= MAX_WAITING and api.max_inflight <= MAX_INFLIGHT


async def test_a_valid_token_survives_a_flood_that_overflows_the_cache() -> None:
    api = FakeAPI(delay=0)
    auth = make_auth(api)
    assert (await auth.authenticate(None, "Bearer good-token")).name == "alice"  # type: ignore[union-attr]
    for batch in range(12):  # 12,000 bad tokens: past the 10,000 entry bound
        await asyncio.gather(
            *(auth.authenticate(None, f"Bearer {secrets.token_urlsafe(16)}") for _ in range(1000))
        )
        assert (await auth.authenticate(None, "Bearer good-token")) is not None, batch
    assert api.reviewed.count("good-token") == 1  # never evicted, never asked again
    assert auth.tokens.cached() <= 2 * TOKEN_CACHE_SIZE


async def test_token_cache_ttl_applies_to_valid_and_invalid_answers() -> None:
    api = FakeAPI(delay=0)
    auth = make_auth(api, authn_ttl=0.3)
    for token in ("good-token", "bad", "good-token", "bad"):
        await auth.authenticate(None, f"Bearer {token}")
    assert sorted(api.reviewed) == ["bad", "good-token"]
    await asyncio.sleep(0.4)
    for token in ("good-token", "bad"):
        await auth.authenticate(None, f"Bearer {token}")
    assert sorted(api.reviewed) == ["bad", "bad", "good-token", "good-token"]


async def test_subject_access_reviews_carry_uid_groups_and_extra() -> None:
    api = FakeAPI()
    runner, base = await serve(make_auth(api))
    try:
        async with aiohttp.ClientSession() as http:
            assert (await get(http, base + "/stats/summary", "good-token"))[0] == 404  # no stats
    finally:
        await runner.cleanup()
    assert api.sars == [
        {
            "resourceAttributes": {
                "verb": "get",
                "version": "v1",
                "resource": "nodes",
                "subresource": "stats",
                "name": "node-a",
            },
            "user": "alice",
            "uid": "u-123",
            "groups": ["devs", "system:authenticated"],
            "extra": {"scopes": ["view", "exec"]},
        }
    ]


async def test_fine_grained_subresource_falls_back_to_proxy() -> None:
    api = FakeAPI(allow=lambda spec: spec["resourceAttributes"]["subresource"] == "proxy")
    runner, base = await serve(make_auth(api))
    strict = FakeAPI(allow=lambda spec: spec["resourceAttributes"]["subresource"] == "pods")
    runner2, base2 = await serve(make_auth(strict, fine_grained_authz=False))
    try:
        async with aiohttp.ClientSession() as http:
            assert (await get(http, base + "/pods", "good-token"))[0] == 200
            subs = [x["resourceAttributes"]["subresource"] for x in api.sars]
            assert subs == ["pods", "proxy"]
            # Without the gate only nodes/proxy is asked.
            code, text = await get(http, base2 + "/pods", "good-token")
            assert code == 403
            assert (
                text == "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[proxy])\n"
            )
    finally:
        await runner.cleanup()
        await runner2.cleanup()


async def test_decision_cache_ttls_and_review_errors() -> None:
    api = FakeAPI(allow=lambda spec: spec["resourceAttributes"]["subresource"] == "metrics")
    auth = make_auth(api, authorized_ttl=0.3, unauthorized_ttl=0.3)
    runner, base = await serve(auth)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                assert (await get(http, base + "/metrics", "good-token"))[0] == 200
                assert (await get(http, base + "/stats/summary", "good-token"))[0] == 403
            assert len(api.sars) == 2  # one of each, then the cache
            await asyncio.sleep(0.4)
            assert (await get(http, base + "/metrics", "good-token"))[0] == 200
            assert len(api.sars) == 3
            api.fail = True  # the review itself fails: 500, as upstream, and not cached
            code, text = await get(http, base + "/configz", "good-token")
            assert code == 500 and text.startswith("Authorization error (user=alice")
    finally:
        await runner.cleanup()


async def test_random_token_flood_costs_bounded_memory() -> None:
    """A token is not kept, a fixed-size digest of it is: 2,000 cached 16 KiB
    tokens would be 32 MiB."""
    api = FakeAPI(delay=0)
    auth = make_auth(api)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            await asyncio.gather(
                *(auth.authenticate(None, "Bearer " + secrets.token_hex(8192)) for _ in range(400))
            )
            api.reviewed.clear()  # the fake's own record, not the kubelet's
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert auth.tokens.cached() == 2000
    assert grown < 4 * 1024 * 1024, grown


async def test_checkpoint_needs_create_on_nodes_checkpoint() -> None:
    api = FakeAPI(allow=lambda spec: False)
    runner, base = await serve(make_auth(api))
    try:
        async with aiohttp.ClientSession() as http:
            url = base + "/checkpoint/ns/pod/c"
            headers = {"Authorization": "Bearer good-token"}
            async with http.post(url, headers=headers) as r:
                assert r.status == 403
                assert await r.text() == (
                    "Forbidden (user=alice, verb=create, resource=nodes, "
                    "subresource(s)=[checkpoint])\n"
                )
    finally:
        await runner.cleanup()
    (sar,) = api.sars
    assert sar["resourceAttributes"]["verb"] == "create"
    assert sar["resourceAttributes"]["subresource"] == "checkpoint"
