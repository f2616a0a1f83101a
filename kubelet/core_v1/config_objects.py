"""Secret and ConfigMap: the keyed data that volumes and env read."""

from __future__ import annotations

from typing import TypedDict

from kubelet.core_v1.meta import ObjectMeta


class Secret(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]  # base64, as the API sends it
    type: str
    immutable: bool


class ConfigMap(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]
    binaryData: dict[str, str]  # base64
    immutable: bool
