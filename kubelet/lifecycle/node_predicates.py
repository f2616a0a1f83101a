"""The scheduler filters the kubelet runs again at admission (the NodeAffinity,
NodeName and TaintToleration plugins as pkg/kubelet/lifecycle/predicate.go
calls them), as pure functions of the pod and the node.

Each returns the Rejection upstream's admission gives (reason: the plugin's
name; message: "Predicate <name> failed: <the plugin's reason>"), or None.
"""

from __future__ import annotations

from kubelet.core_v1 import (
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Taint,
    Toleration,
)
from kubelet.lifecycle.rejection import Rejection
from kubelet.types import is_static

NODE_AFFINITY = "NodeAffinity"
NODE_AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME = "NodeName"
NODE_NAME_REASON = "node(s) didn't match the requested node name"
TAINT_TOLERATION = "TaintToleration"
TAINT_TOLERATION_REASON = "node(s) had taints that the pod didn't tolerate"


def predicate_failure(predicate: str, reason: str) -> Rejection:
    """A PredicateFailureError as admission reports it."""
    return Rejection(predicate, f"Predicate {predicate} failed: {reason}")


def node_affinity_mismatch(pod: Pod, node: Node) -> Rejection | None:
    """spec.nodeSelector (every pair) and the required node affinity (any term)."""
    spec = pod["spec"]
    labels = node["metadata"].get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    matches = all(k in labels and labels[k] == v for k, v in selector.items())
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if matches and required is not None:
        name = node["metadata"].get("name", "")
        terms = required.get("nodeSelectorTerms") or []
        matches = any(_term_matches(t, labels, name) for t in terms)
    return None if matches else predicate_failure(NODE_AFFINITY, NODE_AFFINITY_REASON)


def _term_matches(term: NodeSelectorTerm, labels: dict[str, str], node_name: str) -> bool:
    """Expressions and fields ANDed. A term with neither selects nothing, and
    so does one with an invalid requirement (upstream's parse error)."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    results = [_label_requirement(r, labels) for r in exprs]
    results += [_field_requirement(r, {"metadata.name": node_name}) for r in fields]
    return None not in results and all(results)


def _label_requirement(r: NodeSelectorRequirement, labels: dict[str, str]) -> bool | None:
    """labels.Requirement.Matches; None for a requirement upstream refuses to parse."""
    key, op, values = r["key"], r["operator"], r.get("values") or []
    if op in ("In", "NotIn"):
        if not values:
            return None
        inside = key in labels and labels[key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return (key in labels) == (op == "Exists")
    if op in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        have = _int64(labels[key]) if key in labels else None
        if have is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return None


def _field_requirement(r: NodeSelectorRequirement, fields: dict[str, str]) -> bool | None:
    """Only In and NotIn, with exactly one value, are valid on fields."""
    values = r.get("values") or []
    if r["operator"] not in ("In", "NotIn") or len(values) != 1:
        return None
    equal = fields.get(r["key"], "") == values[0]
    return equal if r["operator"] == "In" else not equal


def _int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): an optional sign and decimal digits."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    n = int(text)
    return n if -(2**63) <= n < 2**63 else None


def node_name_mismatch(pod: Pod, node: Node) -> Rejection | None:
    """A pod bound to another node by name."""
    wanted = pod["spec"].get("nodeName") or ""
    if not wanted or wanted == node["metadata"].get("name"):
        return None
    return predicate_failure(NODE_NAME, NODE_NAME_REASON)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Toleration.ToleratesTaint: an empty effect or key matches any; the
    operator Exists ignores the value, Equal (or none) compares it."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint["effect"]:
        return False
    if key and key != taint["key"]:
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_no_execute(pod: Pod, node: Node) -> Rejection | None:
    """A NoExecute taint none of the pod's tolerations match. Static pods are
    exempt (the node could not run its own control plane otherwise)."""
    if is_static(pod):
        return None
    tolerations = pod["spec"].get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint["effect"] == "NoExecute" and not any(tolerates(t, taint) for t in tolerations):
            return predicate_failure(TAINT_TOLERATION, TAINT_TOLERATION_REASON)
    return None
