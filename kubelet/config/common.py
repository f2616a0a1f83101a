"""Static pod decoding, defaulting and validation (pkg/kubelet/config/common.go)."""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Any

import orjson
import yaml

from kubelet.config import static_refs
from kubelet.config.resources import ResourceError, default_pod_resources, validate_pod_resources
from kubelet.types import CONFIG_HASH, CONFIG_SEEN, CONFIG_SOURCE, JSONObject, Pod, as_pod
from kubelet.util.validation import is_dns1123_label, is_dns1123_subdomain

MAX_UID_LENGTH = 128
_UID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """A manifest that cannot become a pod; the message says why."""


# A manifest is a Pod, not a data set: past these it is an error, as a YAML
# file that aliases one list into a billion-element tree (Go's YAML decoder
# refuses excessive aliasing too).
MAX_NODES = 200_000
MAX_DEPTH = 200


def _check_json(doc: object) -> None:
    """Reject what the API's JSON decoder would: non-string keys, YAML-only
    types (binary, sets), and trees too deep or too big once aliases are
    expanded. An unquoted YAML date becomes its text, as the YAML-to-JSON step
    of Go's decoder leaves it. Iterative: deep nesting is an error, not a crash."""
    stack: list[tuple[Any, int, str]] = [(doc, 0, "")]
    nodes = 0
    while stack:
        node, depth, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ManifestError(f"manifest is too large (more than {MAX_NODES} values)")
        if depth > MAX_DEPTH:
            raise ManifestError(f"manifest is nested deeper than {MAX_DEPTH} levels at {path}")
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise ManifestError(f"{path or '.'}: object keys must be strings, got {k!r}")
                if isinstance(v, datetime.date):
                    node[k] = v = v.isoformat()
                stack.append((v, depth + 1, f"{path}.{k}"))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, datetime.date):
                    node[i] = v = v.isoformat()
                stack.append((v, depth + 1, f"{path}[{i}]"))
        elif node is not None and not isinstance(node, str | int | float | bool):
            raise ManifestError(f"{path or '.'}: {type(node).__name__} is not a JSON value")
        elif isinstance(node, int) and not -(2**63) <= node < 2**64:
            # Go's decoder has no integers past 64 bits (and orjson neither).
            raise ManifestError(f"{path or '.'}: {node} is out of the 64-bit integer range")


def now_rfc3339nano() -> str:
    t = datetime.datetime.now(datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def decode_manifest(data: bytes) -> list[JSONObject]:
    """YAML or JSON: a Pod, or a PodList/List of pods (the HTTP source sends those)."""
    try:
        # libyaml's loader when built in: the pure-Python one takes seconds on a
        # few kilobytes of deep nesting (and the URL source decodes on the loop).
        doc = yaml.load(data, Loader=_Loader)
    except yaml.YAMLError as err:
        raise ManifestError(f"invalid YAML/JSON: {err}".replace("\n", " ")) from err
    except RecursionError as err:
        raise ManifestError("invalid YAML/JSON: nested too deeply") from err
    if not isinstance(doc, dict):
        raise ManifestError("manifest is not an object")
    _check_json(doc)
    kind = doc.get("kind")
    if kind in ("PodList", "List"):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError("items must be a list")
        if not all(isinstance(i, dict) for i in items):
            raise ManifestError("list items must be objects")
        return items
    if kind != "Pod":
        raise ManifestError(f'kind must be "Pod", got {kind!r}')
    return [doc]


def _default_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("imagePullPolicy", _default_pull_policy(str(c.get("image", ""))))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    # A request left out is the limit (SetDefaults_Pod).
    if res.get("limits"):
        res["requests"] = {**res["limits"], **(res.get("requests") or {})}


def _object_or_null(d: dict[str, Any], key: str, path: str) -> None:
    """A JSON null is the zero value (absent); anything but an object is an error."""
    v = d.get(key)
    if v is None:
        d.pop(key, None)
    elif not isinstance(v, dict):
        raise ManifestError(f"{path}: must be an object")


def _list_or_null(d: dict[str, Any], key: str, path: str) -> None:
    v = d.get(key)
    if v is None:
        d.pop(key, None)
    elif not isinstance(v, list):
        raise ManifestError(f"{path}: must be a list")


def _string_map(d: dict[str, Any], key: str, path: str) -> None:
    _object_or_null(d, key, path)
    for k, v in (d.get(key) or {}).items():
        if not isinstance(v, str):
            raise ManifestError(f"{path}.{k}: must be a string")


def _label_errors(value: object, path: str) -> None:
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{path}: Required value")
    errs = is_dns1123_label(value)
    if errs:
        raise ManifestError(f"{path}: Invalid value: {value!r}: {'; '.join(errs)}")


def validate_uid(uid: object) -> None:
    """A uid names the pod's directory (<root>/pods/<uid>) and ends its log dir
    (<ns>_<name>_<uid>): one path component, without `..` or `_`, sane length.
    The API server makes UUIDs; a manifest may pin any such value."""
    if not isinstance(uid, str):
        raise ManifestError("metadata.uid: must be a string")
    if len(uid) > MAX_UID_LENGTH or not _UID.fullmatch(uid) or ".." in uid:
        raise ManifestError(
            f"metadata.uid: Invalid value: {uid!r}: must be at most {MAX_UID_LENGTH} letters, "
            "digits, '-' or '.', start and end with a letter or digit, and hold no '..'"
        )


def _named_once(obj: object, path: str, seen: set[str]) -> None:
    """An object whose name is a DNS-1123 label not used before in `seen`."""
    if not isinstance(obj, dict):
        raise ManifestError(f"{path}: must be an object")
    _label_errors(obj.get("name"), f"{path}.name")
    if obj["name"] in seen:
        raise ManifestError(f"{path}.name: Duplicate value: {obj['name']!r}")
    seen.add(obj["name"])


def _validate_meta(md: object) -> None:
    if not isinstance(md, dict):
        raise ManifestError("metadata is required")
    _string_map(md, "labels", "metadata.labels")
    _string_map(md, "annotations", "metadata.annotations")
    if md.get("uid") is not None:
        validate_uid(md["uid"])
    name = md.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError("metadata.name: Required value")
    errs = is_dns1123_subdomain(name)
    if errs:
        raise ManifestError(f"metadata.name: Invalid value: {name!r}: {'; '.join(errs)}")
    if md.get("namespace") is not None:
        _label_errors(md["namespace"], "metadata.namespace")


def _validate_containers(spec: dict[str, Any]) -> dict[str, str]:
    """Checks every container; returns the volume names they mount."""
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError("spec.containers: Required value")
    if spec.get("ephemeralContainers"):
        # As the API server on create; they are added through their subresource.
        raise ManifestError("spec.ephemeralContainers: Forbidden: cannot be set on create")
    seen: set[str] = set()
    mounted: dict[str, str] = {}
    for field in ("initContainers", "containers"):
        items = spec.get(field) or []
        if not isinstance(items, list):
            raise ManifestError(f"spec.{field}: must be a list")
        for i, c in enumerate(items):
            path = f"spec.{field}[{i}]"
            _named_once(c, path, seen)
            if not c.get("image"):
                raise ManifestError(f"{path}.image: Required value")
            if not isinstance(c["image"], str):
                raise ManifestError(f"{path}.image: must be a string")
            _object_or_null(c, "resources", f"{path}.resources")
            for key in ("command", "args"):
                if key in c and not (
                    isinstance(c[key], list) and all(isinstance(a, str) for a in c[key])
                ):
                    raise ManifestError(f"{path}.{key}: must be a list of strings")
            mounted = _mount_names(c, path) | mounted
    return mounted


def _mount_names(c: dict[str, Any], path: str) -> dict[str, str]:
    """The volume names a container mounts, each with the field that names it."""
    _list_or_null(c, "volumeMounts", f"{path}.volumeMounts")
    names: dict[str, str] = {}
    for j, m in enumerate(c.get("volumeMounts") or []):
        mpath = f"{path}.volumeMounts[{j}]"
        if not isinstance(m, dict):
            raise ManifestError(f"{mpath}: must be an object")
        if not isinstance(m.get("name"), str) or not m["name"]:
            raise ManifestError(f"{mpath}.name: Required value")
        if not isinstance(m.get("mountPath"), str) or not m["mountPath"]:
            raise ManifestError(f"{mpath}.mountPath: Required value")
        names.setdefault(m["name"], f"{mpath}.name")
    return names


def _validate_volumes(spec: dict[str, Any], mounted: dict[str, str]) -> None:
    """Volume names become directories (pods/<uid>/volumes/<plugin>/<name>):
    DNS-1123 labels, unique, and every mount names one of them, as the API
    server requires."""
    _list_or_null(spec, "volumes", "spec.volumes")
    names: set[str] = set()
    for i, v in enumerate(spec.get("volumes") or []):
        _named_once(v, f"spec.volumes[{i}]", names)
    missing = sorted(set(mounted) - names)
    if missing:
        raise ManifestError(f"{mounted[missing[0]]}: Not found: {missing[0]!r}")


def _validate_host_users(spec: dict[str, Any]) -> None:
    """hostUsers: false rules out the host's namespaces and raw block devices,
    as the API server's validateHostUsers (its field spellings included)."""
    if spec.get("hostUsers") is not False:
        return
    for field in ("hostNetwork", "HostPID", "HostIPC"):
        if spec.get(field[0].lower() + field[1:]):
            raise ManifestError(f"spec.{field}: Forbidden: when `hostUsers` is false")
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            if c.get("volumeDevices"):
                raise ManifestError(
                    f"spec.{kind}[{i}].volumeDevices: Forbidden: when `hostUsers` is false"
                )


def validate(pod: JSONObject) -> None:
    _validate_meta(pod.get("metadata"))
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError("spec: Required value")
    _object_or_null(spec, "securityContext", "spec.securityContext")
    _list_or_null(spec, "tolerations", "spec.tolerations")
    _list_or_null(spec, "initContainers", "spec.initContainers")
    _validate_volumes(spec, _validate_containers(spec))
    _validate_host_users(spec)
    try:
        validate_pod_resources(spec)
    except ResourceError as err:
        raise ManifestError(str(err)) from err
    policy = spec.get("restartPolicy", "Always")
    if not isinstance(policy, str) or policy not in ("Always", "OnFailure", "Never"):
        raise ManifestError(f"spec.restartPolicy: Unsupported value: {policy!r}")


def static_pod(
    pod: JSONObject, source: str, source_kind: str, node_name: str, prevent_refs: bool
) -> Pod:
    """What a static pod source makes of one manifest document: defaulted and
    validated, then refused if it names API objects (prevent_refs: the
    PreventStaticPodAPIReferences gate), as upstream's decoding does."""
    out = apply_defaults(pod, source, source_kind, node_name)
    try:
        static_refs.check(out["spec"], prevent_refs)
    except static_refs.StaticPodReferenceError as err:
        raise ManifestError(str(err)) from err
    return out


def apply_defaults(pod: JSONObject, source: str, source_kind: str, node_name: str) -> Pod:
    """Turn a manifest into the static pod the node runs (applyDefaults upstream):
    where the JSON a source read becomes a typed Pod."""
    validate(pod)
    md = pod["metadata"]
    if not md.get("uid"):
        # The UID depends on the content, the node and the file, so an edited
        # manifest is a new pod unless it pins metadata.uid itself.
        h = hashlib.md5(usedforsecurity=False)
        h.update(orjson.dumps(pod, option=orjson.OPT_SORT_KEYS))
        h.update(f"host:{node_name}".encode())
        h.update(f"file:{source}".encode())
        md["uid"] = h.hexdigest()
    md["name"] = f"{md['name']}-{node_name}"
    errs = is_dns1123_subdomain(md["name"])
    if errs:
        # The API server sees the name with the node's suffix: so must the check.
        raise ManifestError(f"metadata.name: Invalid value: {md['name']!r}: {'; '.join(errs)}")
    md.setdefault("namespace", "default")
    md["namespace"] = md["namespace"] or "default"
    ann = md.setdefault("annotations", {}) or {}
    md["annotations"] = ann
    ann[CONFIG_HASH] = str(md["uid"])
    ann[CONFIG_SEEN] = now_rfc3339nano()
    ann[CONFIG_SOURCE] = source_kind
    md.setdefault("labels", {})
    spec = pod["spec"]
    spec["nodeName"] = node_name
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    tolerations = spec.setdefault("tolerations", [])
    if {"operator": "Exists", "effect": "NoExecute"} not in tolerations:
        tolerations.append({"operator": "Exists", "effect": "NoExecute"})
    for c in spec.get("initContainers") or []:
        _default_container(c)
    for c in spec["containers"]:
        _default_container(c)
    default_pod_resources(spec)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    pod["status"] = {"phase": "Pending"}
    return as_pod(pod)
