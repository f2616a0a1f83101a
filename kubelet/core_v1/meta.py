"""What every core/v1 object shares: quantities, metadata, references, and the
selectors and key lists that point into other objects.
"""

from __future__ import annotations

from typing import Required, TypedDict

# A resource quantity as JSON carries it: "100m", "1Gi", or a bare number.
Quantity = str | int | float
ResourceList = dict[str, Quantity]
# An int-or-string (ports, maxUnavailable): 8080 or "http".
IntOrString = int | str


# ------------------------------------------------------------- metadata
class OwnerReference(TypedDict, total=False):
    apiVersion: Required[str]
    kind: Required[str]
    name: Required[str]
    uid: Required[str]
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class ObjectReference(TypedDict, total=False):
    kind: str
    namespace: str
    name: str
    uid: str
    apiVersion: str
    resourceVersion: str
    fieldPath: str


class LocalObjectReference(TypedDict, total=False):
    name: str


# ------------------------------------------------------------ selectors
class ObjectFieldSelector(TypedDict, total=False):
    apiVersion: str
    fieldPath: Required[str]


class ResourceFieldSelector(TypedDict, total=False):
    containerName: str
    resource: Required[str]
    divisor: Quantity


class KeySelector(TypedDict, total=False):
    """configMapKeyRef and secretKeyRef: two API types of one shape."""

    name: str
    key: Required[str]
    optional: bool


ConfigMapKeySelector = KeySelector
SecretKeySelector = KeySelector


class KeyToPath(TypedDict, total=False):
    key: Required[str]
    path: Required[str]
    mode: int
