"""Authentication and authorization of requests to the kubelet port.

x509 client certificates (--client-ca-file) and anonymous requests
(--anonymous-auth) are authenticated here; the authorizer is AlwaysAllow.
Webhook modes (TokenReview / SubjectAccessReview) need an API server and come
with cluster mode; run() refuses them without one, as the Go kubelet does.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

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

    def authenticate(self, ssl_object: ssl.SSLObject | None) -> UserInfo | None:
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
        if self.anonymous_enabled:
            return UserInfo(ANONYMOUS, ["system:unauthenticated"])
        return None

    def authorize(self, user: UserInfo, verb: str, path: str) -> bool:
        if self.authorization_mode == "AlwaysAllow":
            return True
        # Webhook authorization is only constructed with an API client.
        return False
