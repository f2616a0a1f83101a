"""Authentication and authorization of requests to the kubelet port.

Authentication: x509 client certificates (--client-ca-file), then bearer
tokens checked with a TokenReview (webhook authentication, cluster mode),
then anonymous requests (--anonymous-auth). Authorization: AlwaysAllow, or
Webhook: a SubjectAccessReview on nodes/<subresource> of this node, with the
verb from the HTTP method and the subresource from the path, as upstream.
Review results are cached for the configured TTLs. Without an API client,
run() refuses Webhook authorization, as the Go kubelet does.
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# Path prefix -> nodes subresource (kubelet server auth.go); anything else is "proxy".
_SUBRESOURCES = (
    ("/stats", "stats"),
    ("/metrics", "metrics"),
    ("/logs", "log"),
    ("/spec", "spec"),
    ("/checkpoint", "checkpoint"),
    ("/configz", "configz"),
    ("/healthz", "healthz"),
    ("/pods", "pods"),
)
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}  # fmt: skip


def subresource(path: str) -> str:
    for prefix, sub in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            return sub
    return "proxy"


def api_verb(method: str) -> str:
    return _VERBS.get(method.upper(), method.lower())


class _TTLCache:
    def __init__(self) -> None:
        self._d: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any:
        hit = self._d.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        if ttl > 0:
            if len(self._d) > 10000:
                self._d.clear()  # bounded: a flood of distinct tokens cannot grow it
            self._d[key] = (time.monotonic() + ttl, value)


ANONYMOUS = "system:anonymous"


@dataclass
class UserInfo:
    name: str
    groups: list[str] = field(default_factory=list)


@dataclass
class ServerAuth:
    anonymous_enabled: bool
    authorization_mode: str
    x509_enabled: bool = False
    # Cluster mode: the API client for TokenReview / SubjectAccessReview.
    client: Any = None
    node_name: str = ""
    webhook_authn: bool = False
    authn_ttl: float = 120.0
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    _tokens: _TTLCache = field(default_factory=_TTLCache)
    _decisions: _TTLCache = field(default_factory=_TTLCache)

    async def authenticate(
        self, ssl_object: ssl.SSLObject | None, authorization: str | None = None
    ) -> UserInfo | None:
        if self.x509_enabled and ssl_object is not None:
            cert = ssl_object.getpeercert()
            if cert:
                cn = ""
                groups: list[str] = []
                subject: Any = cert.get("subject", ())
                for rdn in subject:
                    for key, value in rdn:
                        if key == "commonName":
                            cn = value
                        elif key == "organizationName":
                            groups.append(value)
                if cn:
                    return UserInfo(cn, [*groups, "system:authenticated"])
        if authorization and authorization.lower().startswith("bearer "):
            user = await self._token_review(authorization[7:].strip())
            if user is not None:
                return user
        if self.anonymous_enabled:
            return UserInfo(ANONYMOUS, ["system:unauthenticated"])
        return None

    async def _token_review(self, token: str) -> UserInfo | None:
        if not (self.webhook_authn and self.client is not None and token):
            return None
        cached = self._tokens.get(token)
        if cached is not None:
            return cached or None
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            out = await self.client.create("/apis/authentication.k8s.io/v1/tokenreviews", review)
        except Exception as err:
            log.warning("TokenReview failed: %s", err)
            return None  # not cached: the next request asks again
        st = out.get("status") or {}
        user: UserInfo | bool = False
        if st.get("authenticated"):
            u = st.get("user") or {}
            user = UserInfo(str(u.get("username", "")), list(u.get("groups") or []))
        self._tokens.put(token, user, self.authn_ttl)
        return user if isinstance(user, UserInfo) else None

    async def authorize(self, user: UserInfo, method: str, path: str) -> bool:
        if self.authorization_mode == "AlwaysAllow":
            return True
        if self.authorization_mode != "Webhook" or self.client is None:
            return False
        attrs = {
            "verb": api_verb(method),
            "resource": "nodes",
            "subresource": subresource(path),
            "name": self.node_name,
        }
        key = (user.name, tuple(user.groups), tuple(attrs.values()))
        cached = self._decisions.get(key)
        if cached is not None:
            return bool(cached)
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user.name, "groups": user.groups, "resourceAttributes": attrs},
        }
        try:
            out = await self.client.create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
            )
        except Exception as err:
            log.warning("SubjectAccessReview failed: %s", err)
            return False
        allowed = bool((out.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, self.authorized_ttl if allowed else self.unauthorized_ttl)
        return allowed
