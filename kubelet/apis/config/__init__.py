"""KubeletConfiguration (kubelet.config.k8s.io/v1beta1): types, defaults, loading, validation."""

from kubelet.apis.config.types import (
    KubeletAnonymousAuthentication,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    KubeletWebhookAuthentication,
    KubeletWebhookAuthorization,
    KubeletX509Authentication,
    LoggingConfiguration,
    MemorySwapConfiguration,
)

__all__ = [
    "KubeletAnonymousAuthentication",
    "KubeletAuthentication",
    "KubeletAuthorization",
    "KubeletConfiguration",
    "KubeletWebhookAuthentication",
    "KubeletWebhookAuthorization",
    "KubeletX509Authentication",
    "LoggingConfiguration",
    "MemorySwapConfiguration",
]
