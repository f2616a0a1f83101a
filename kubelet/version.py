"""Versions: the Kubernetes release whose kubelet this one follows, which is
what the Node reports as nodeInfo.kubeletVersion (version-skew rules, kubectl
and controllers read it as a Kubernetes version), and the project's own
version, which travels in the user agent."""

from __future__ import annotations

import platform

import kubelet

KUBERNETES_VERSION = "v1.34.4"


def user_agent() -> str:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"kubelet/{KUBERNETES_VERSION} (linux/{arch}) kubelet-py/{kubelet.__version__}"
