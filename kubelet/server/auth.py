"""Authentication and authorization of requests to the kubelet port
(pkg/kubelet/server/auth.go and the delegating authenticator/authorizer).

Authentication, in upstream's order: an x509 client certificate verified
against the client CA bundle (at the TLS handshake), then a bearer token
checked with a TokenReview (webhook authentication, cluster mode), then
anonymous. A bearer token that is not valid, or that could not be checked, is
refused (401), never treated as anonymous. Authorization: AlwaysAllow, or
Webhook: a SubjectAccessReview on nodes/<subresource> of this node with the
user's name, uid, groups and extra; with KubeletFineGrainedAuthz, /pods,
/healthz, /configz and /runningpods/ first ask for their own subresource and
then for nodes/proxy. Both kinds of review are cached (authcache.py).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from kubelet.client.rest import APIClient, APIError
from kubelet.server.authcache import (
    DECISION_CACHE_SIZE,
    CachedTokenAuthenticator,
    ExpiringLRU,
    ReviewError,
)

log = logging.getLogger(__name__)

ANONYMOUS = "system:anonymous"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"

# Path -> nodes subresource (auth.go); anything else is "proxy".
_SUBRESOURCES = (
    ("/stats", "stats"),
    ("/metrics", "metrics"),
    ("/logs", "log"),
    ("/checkpoint", "checkpoint"),
    ("/statusz", "statusz"),
    ("/flagz", "configz"),
)
# With KubeletFineGrainedAuthz: asked first, then the subresource above.
_FINE_GRAINED = (
    ("/pods", "pods"),
    ("/healthz", "healthz"),
    ("/configz", "configz"),
    ("/runningpods", "pods"),
)
# What an API call can fail with (TimeoutError is an OSError; bad JSON a ValueError).
_API_ERRORS = (APIError, aiohttp.ClientError, OSError, ValueError)
_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _is_subpath(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def subresources(path: str, fine_grained: bool = True) -> list[str]:
    out = []
    if fine_grained:
        out += [sub for prefix, sub in _FINE_GRAINED if _is_subpath(path, prefix)][:1]
    out.append(next((sub for prefix, sub in _SUBRESOURCES if _is_subpath(path, prefix)), "proxy"))
    return out


def api_verb(method: str) -> str:
    """Upstream maps these five; any other method (HEAD too) gets no verb."""
    return _VERBS.get(method.upper(), "")


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _with_authenticated(user: UserInfo) -> UserInfo:
    """Upstream's AuthenticatedGroupAdder."""
    if AUTHENTICATED in user.groups or user.name == ANONYMOUS:
        return user
    return UserInfo(user.name, (*user.groups, AUTHENTICATED), user.uid, user.extra)


class AuthorizationError(Exception):
    """A SubjectAccessReview that could not be made (upstream answers 500)."""

    def __init__(self, subresource: str, message: str) -> None:
        super().__init__(message)
        self.subresource = subresource


@dataclass(frozen=True)
class Decision:
    allowed: bool
    subresources: list[str]


def _user_from_review(status: dict[str, Any]) -> UserInfo | None:
    if not status.get("authenticated"):
        return None
    u = status.get("user") or {}
    extra = tuple(
        sorted((str(k), tuple(map(str, v or ()))) for k, v in (u.get("extra") or {}).items())
    )
    groups = tuple(str(g) for g in u.get("groups") or ())
    return UserInfo(str(u.get("username", "")), groups, str(u.get("uid", "")), extra)


@dataclass
class ServerAuth:
    anonymous_enabled: bool
    authorization_mode: str
    x509_enabled: bool = False
    # Cluster mode: the API client for TokenReview / SubjectAccessReview.
    client: APIClient | None = None
    node_name: str = ""
    webhook_authn: bool = False
    authn_ttl: float = 120.0
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    fine_grained_authz: bool = True
    tokens: CachedTokenAuthenticator[UserInfo] = field(init=False)
    _decisions: ExpiringLRU[bytes, bool] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = CachedTokenAuthenticator(self._token_review, self.authn_ttl)
        self._decisions = ExpiringLRU(DECISION_CACHE_SIZE)

    async def authenticate(
        self, ssl_object: ssl.SSLObject | None, authorization: str | None = None
    ) -> UserInfo | None:
        """The request's user, or None: answer 401."""
        if self.x509_enabled and ssl_object is not None:
            user = _cert_user(ssl_object.getpeercert())
            if user is not None:
                return _with_authenticated(user)
        token = _bearer(authorization)
        if token and self.webhook_authn and self.client is not None:
            try:
                user = await self.tokens.authenticate(token)
            except ReviewError as err:
                log.error("Unable to authenticate the request due to an error: %s", err)
                return None
            return _with_authenticated(user) if user is not None else None
        if self.anonymous_enabled:
            return UserInfo(ANONYMOUS, (UNAUTHENTICATED,))
        return None

    async def _token_review(self, token: str) -> UserInfo | None:
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        if self.client is None:  # build_auth refuses webhook authentication without one
            raise ReviewError("TokenReview failed: no API client")
        try:
            out = await self.client.create("/apis/authentication.k8s.io/v1/tokenreviews", review)
        except _API_ERRORS as err:
            raise ReviewError(f"TokenReview failed: {err}") from err
        return _user_from_review(out.get("status") or {})

    async def authorize(self, user: UserInfo, method: str, path: str) -> Decision:
        subs = subresources(path, self.fine_grained_authz)
        if self.authorization_mode == "AlwaysAllow":
            return Decision(True, subs)
        if self.authorization_mode != "Webhook" or self.client is None:
            return Decision(False, subs)
        for sub in subs:
            if await self._review_access(user, api_verb(method), sub):
                return Decision(True, subs)
        return Decision(False, subs)

    async def _review_access(self, user: UserInfo, verb: str, sub: str) -> bool:
        spec: dict[str, Any] = {
            "resourceAttributes": {
                "verb": verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": sub,
                "name": self.node_name,
            },
            "user": user.name,
            "groups": list(user.groups),
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        found, cached = self._decisions.get(key)
        if found:
            return bool(cached)
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        if self.client is None:  # build_auth refuses Webhook authorization without one
            raise AuthorizationError(sub, "no API client")
        try:
            out = await self.client.create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
            )
        except _API_ERRORS as err:
            raise AuthorizationError(sub, str(err)) from err
        allowed = bool((out.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, self.authorized_ttl if allowed else self.unauthorized_ttl)
        return allowed


def _bearer(authorization: str | None) -> str:
    """The token of an "Authorization: Bearer <token>" header, as upstream parses it."""
    parts = (authorization or "").strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


def _cert_user(cert: Any) -> UserInfo | None:
    """CommonNameUserConversion: CN is the name, O are the groups."""
    if not cert:
        return None
    cn = ""
    groups: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
            elif key == "organizationName":
                groups.append(value)
    return UserInfo(cn, tuple(groups)) if cn else None
