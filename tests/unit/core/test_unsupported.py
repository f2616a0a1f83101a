"""Nothing silently ignored: the pod fields this kubelet does not implement are
named, and the ones it implements (or the API's defaults) are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kubelet.config.common import apply_defaults
from kubelet.core_v1.known_fields import api_source, unknown_fields
from kubelet.pod_sync import KubeletPodSyncer
from kubelet.podmanager import PodManager
from kubelet.types import Pod
from kubelet.unsupported import unsupported_fields


def pod(**spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "c", "image": "busybox:1.36"}])
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    p["spec"] = {"containers": containers, **spec}
    return apply_defaults(p, "/m/p.yaml", "file", "n1")


def test_a_pod_using_only_implemented_fields_is_not_warned_about() -> None:
    p = pod(
        hostAliases=[{"ip": "10.0.0.1", "hostnames": ["a"]}],
        shareProcessNamespace=True,
        activeDeadlineSeconds=30,
        readinessGates=[{"conditionType": "example.com/ready"}],
        imagePullSecrets=[{"name": "regcred"}],
        runtimeClassName="kata",
        overhead={"cpu": "250m", "memory": "120Mi"},
        securityContext={
            "runAsUser": 1000,
            "fsGroup": 2000,
            "sysctls": [{"name": "a", "value": "1"}],
        },
        volumes=[
            {"name": "v", "emptyDir": {}},
            {"name": "nfs", "nfs": {"server": "x", "path": "/"}},
            {"name": "blk", "persistentVolumeClaim": {"claimName": "raw"}},
        ],
        containers=[
            {
                "name": "c",
                "image": "busybox:1.36",
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "envFrom": [{"configMapRef": {"name": "cm"}}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                "volumeDevices": [{"name": "blk", "devicePath": "/dev/xvda"}],
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}, "runAsNonRoot": True},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    )
    # (an nfs volume is not listed: the volume manager reports it as FailedMount)
    assert unsupported_fields(p) == []


def test_every_unimplemented_field_is_named_with_its_container() -> None:
    p = pod(
        overhead={"cpu": "250m", "hugepages-2Mi": "2Mi", "ephemeral-storage": "1Gi"},
        securityContext={"seLinuxChangePolicy": "MountOption"},
        initContainers=[{"name": "i", "image": "busybox:1.36", "restartPolicy": "OnFailure"}],
        containers=[
            {
                "name": "app",
                "image": "busybox:1.36",
                "resources": {
                    "limits": {"hugepages-2Mi": "2Mi", "ephemeral-storage": "1Gi", "memory": "1Gi"}
                },
                "lifecycle": {"stopSignal": "SIGUSR1"},
            }
        ],
    )
    assert unsupported_fields(p) == [
        # hugepages are hugetlb limits (cm/hugepages): not named
        "spec.overhead[ephemeral-storage]",
        "spec.securityContext.seLinuxChangePolicy",
        "spec.initContainers[i].restartPolicy",
        "spec.containers[app].lifecycle.stopSignal",
        "spec.containers[app].resources.limits[ephemeral-storage]",
        # the request a left-out request defaults to (the limit)
        "spec.containers[app].resources.requests[ephemeral-storage]",
    ]


def test_resource_claims_are_named_only_when_dra_is_off() -> None:
    p = pod(
        resourceClaims=[{"name": "g", "resourceClaimName": "gpus"}],
        containers=[{"name": "app", "image": "busybox:1.36"}],
    )
    assert unsupported_fields(p, dra=True) == []
    assert unsupported_fields(p, dra=False) == ["spec.resourceClaims"]
    # The scheduler's claim for DRA-backed extended resources (DRAExtendedResource).
    p["status"] = {"extendedResourceClaimStatus": {"resourceClaimName": "x"}}
    assert unsupported_fields(p, dra=True) == ["status.extendedResourceClaimStatus"]


def test_alpha_fields_the_kubelet_does_not_implement_are_named() -> None:
    """An API server with ContainerRestartRules, EnvFiles or HostnameOverride on
    passes these through; this kubelet implements none of them."""
    rules = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]
    p = pod(
        hostnameOverride="other",
        initContainers=[
            {"name": "side", "image": "busybox:1.36", "restartPolicy": "Always"},
            {"name": "i", "image": "busybox:1.36", "restartPolicyRules": rules},
        ],
        containers=[
            {
                "name": "app",
                "image": "busybox:1.36",
                "restartPolicy": "Never",
                "restartPolicyRules": rules,
                "env": [
                    {"name": "PLAIN", "value": "x"},
                    {
                        "name": "FROM_FILE",
                        "valueFrom": {
                            "fileKeyRef": {"volumeName": "v", "path": "e.env", "key": "K"}
                        },
                    },
                ],
            }
        ],
    )
    # Added later through their subresource, as the API server allows.
    p["spec"]["ephemeralContainers"] = [
        {
            "name": "dbg",
            "image": "busybox:1.36",
            "env": [{"name": "F", "valueFrom": {"fileKeyRef": {"volumeName": "v"}}}],
        }
    ]
    assert unsupported_fields(p) == [
        "spec.hostnameOverride",
        # the sidecar's restartPolicy Always is implemented: not named
        "spec.initContainers[i].restartPolicyRules",
        "spec.containers[app].restartPolicy",
        "spec.containers[app].env[FROM_FILE].valueFrom.fileKeyRef",
        "spec.containers[app].restartPolicyRules",
        "spec.ephemeralContainers[dbg].env[F].valueFrom.fileKeyRef",
    ]


def test_fields_the_pinned_api_does_not_declare_are_named() -> None:
    """A newer API server's field, or a manifest's typo that the decoder would
    drop, is named with where it is."""
    p = pod(
        containers=[
            {
                "name": "app",
                "image": "busybox:1.36",
                "securityContext": {"runAsUser": 1, "fancyNewKnob": True},
                "livenessProbe": {"exec": {"command": ["true"]}, "periodSecond": 3},
                "resources": {"limits": {"cpu": "1"}},
                "ports": [{"containerPort": 80, "protocl": "TCP"}],
            }
        ],
        volumes=[{"name": "v", "emptyDir": {"medium": "Memory", "sizeLimitt": "1Gi"}}],
        futureField={"a": 1},
    )
    # Maps with user keys (nodeSelector, resources) are not field names.
    p["spec"]["nodeSelector"] = {"anything/goes": "x"}
    source = api_source()
    assert source.startswith("k8s.io/api@v0.34")
    assert unsupported_fields(p) == [
        f"spec.containers[app].securityContext.fancyNewKnob (not in {source})",
        f"spec.containers[app].livenessProbe.periodSecond (not in {source})",
        f"spec.containers[app].ports[0].protocl (not in {source})",
        f"spec.volumes[v].emptyDir.sizeLimitt (not in {source})",
        f"spec.futureField (not in {source})",
    ]


def test_every_field_of_a_full_pod_spec_is_known() -> None:
    """The sample manifests and a pod using many fields produce no unknown field."""
    from pathlib import Path

    import yaml

    samples = Path(__file__).parents[3] / "samples"
    docs = [
        d
        for f in sorted(samples.rglob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if isinstance(d, dict) and d.get("kind") == "Pod"
    ]
    assert docs, "no sample pods found"
    for d in docs:
        assert unknown_fields(d["spec"]) == [], d["metadata"]["name"]


class _Events:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def event(self, ref: dict[str, Any], etype: str, reason: str, message: str) -> None:
        assert (etype, reason) == ("Warning", "UnsupportedPodFields")
        self.messages.append(message)


def test_the_pod_is_told_once_and_again_only_of_what_an_ephemeral_container_adds(
    tmp_path: Path,
) -> None:
    events = _Events()
    syncer = KubeletPodSyncer(
        str(tmp_path), [], None, None, None, PodManager(), None, None, None, None,  # type: ignore[arg-type]
        recorder=events,  # type: ignore[arg-type]
    )  # fmt: skip
    p = pod(hostnameOverride="h")

    def sync() -> None:
        syncer._first_sync(cast(Pod, p))

    sync()
    sync()
    assert events.messages == [
        "Fields not implemented by this kubelet, ignored: spec.hostnameOverride"
    ]
    # kubectl debug adds an ephemeral container to the running pod.
    debug = {"name": "dbg", "image": "busybox:1.36", "restartPolicyRules": [{"action": "Restart"}]}
    p["spec"]["ephemeralContainers"] = [debug]
    sync()
    sync()
    assert events.messages[1:] == [
        "Fields not implemented by this kubelet, ignored: "
        "spec.ephemeralContainers[dbg].restartPolicyRules"
    ]
    # A second one with nothing unsupported: no word.
    p["spec"]["ephemeralContainers"].append({"name": "dbg2", "image": "busybox:1.36"})
    sync()
    assert len(events.messages) == 2
