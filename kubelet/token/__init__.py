"""Service-account tokens for pods (pkg/kubelet/token upstream)."""

from kubelet.token.manager import (
    BoundObjectRef,
    ServiceAccountToken,
    TokenManager,
    TokenRequestSpec,
)

__all__ = ["BoundObjectRef", "ServiceAccountToken", "TokenManager", "TokenRequestSpec"]
