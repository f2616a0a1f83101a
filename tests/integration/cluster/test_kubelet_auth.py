"""The kubelet port's webhook authentication and authorization against the real
kube-apiserver: a flood of random bearer tokens costs one TokenReview each and
none the second time (counted by the API server's own request metrics), every
one of them is refused (401, not anonymous), and a real service-account token
is reviewed once and authorized through SubjectAccessReviews."""

from __future__ import annotations

import asyncio
import re
import secrets

import aiohttp
import pytest

from kubelet.client.kubeconfig import load_kubeconfig
from kubelet.client.rest import APIClient
from kubelet.server import server as s
from kubelet.server.auth import ServerAuth
from kubelet.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

FLOOD = 2000


async def token_reviews(cp: ControlPlane) -> float:
    """kube-apiserver's count of TokenReview creations so far."""
    text = (await asyncio.to_thread(cp.kubectl, "get", "--raw", "/metrics")).stdout
    pattern = r'apiserver_request_total\{[^}]*resource="tokenreviews"[^}]*verb="POST"[^}]*\} (\S+)'
    return sum(float(v) for v in re.findall(pattern, text))


async def test_token_flood_against_the_real_api_server(control_plane: ControlPlane) -> None:
    api = APIClient(load_kubeconfig(control_plane.admin_kubeconfig), 0, 1)
    auth = ServerAuth(
        anonymous_enabled=True,
        authorization_mode="Webhook",
        client=api,
        node_name="flood-node",
        webhook_authn=True,
    )
    app = s.kubelet_app(lambda: s.NoPods(), dict, [], auth)
    runner = await s.serve(app, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    tokens = [secrets.token_urlsafe(32) for _ in range(FLOOD)]
    sa_token = control_plane.kubectl("create", "token", "default").stdout.strip()

    async def get(http: aiohttp.ClientSession, token: str) -> int:
        async with http.get(base + "/pods", headers={"Authorization": f"Bearer {token}"}) as r:
            return r.status

    try:
        before = await token_reviews(control_plane)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as http:
            codes = await asyncio.gather(*(get(http, t) for t in tokens))
            assert set(codes) == {401}
            first = await token_reviews(control_plane)
            await asyncio.gather(*(get(http, t) for t in tokens))  # cached refusals
            second = await token_reviews(control_plane)
            # A real token: reviewed once, then denied by RBAC (no nodes/* rights),
            # after asking for nodes/pods and then nodes/proxy.
            assert [await get(http, sa_token) for _ in range(3)] == [403, 403, 403]
            third = await token_reviews(control_plane)
        assert first - before == FLOOD
        assert second == first
        assert third - second == 1
    finally:
        await runner.cleanup()
        await api.close()
