"""PreventStaticPodAPIReferences: a static pod naming an API object is refused
when its manifest is read, with upstream's words; its neighbours still run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.config import static_refs
from kubelet.config.file import read_pods
from kubelet.config.static_refs import StaticPodReferenceError, api_reference

C = {"name": "c", "image": "busybox:1.36"}


def spec(**kw: Any) -> dict[str, Any]:
    return {"containers": [dict(C)], **kw}


def vol(**source: Any) -> dict[str, Any]:
    return {"volumes": [{"name": "v", **source}]}


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [
        (spec(), None),
        (spec(serviceAccountName="sa"), "serviceaccounts"),
        (spec(serviceAccount="sa"), "serviceaccounts"),  # the deprecated alias
        (spec(imagePullSecrets=[{"name": "pull"}]), "secrets"),
        (spec(imagePullSecrets=[{"name": ""}]), None),  # empty names are skipped
        ({"containers": [{**C, "envFrom": [{"secretRef": {"name": "s"}}]}]}, "secrets"),
        ({"containers": [{**C, "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}, "secrets"),
        ({"containers": [C], "initContainers": [{**C, "name": "i", "envFrom": [{"configMapRef": {"name": "m"}}]}]}, "configmaps"),
        ({"containers": [{**C, "env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]}]}, "configmaps"),
        ({"containers": [{**C, "env": [{"name": "E", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}, None),
        (spec(resourceClaims=[{"name": "g", "resourceClaimName": "gpus"}]), "resourceclaims"),
        # The secret and config map passes come before the volume kinds.
        (spec(**vol(secret={"secretName": "s"})), "secrets"),
        (spec(**vol(configMap={"name": "m"})), "configmaps"),
        (spec(**vol(cephfs={"monitors": ["m"], "secretRef": {"name": "s"}})), "secrets"),
        (spec(**vol(csi={"driver": "d", "nodePublishSecretRef": {"name": "s"}})), "secrets"),
        (spec(**vol(projected={"sources": [{"configMap": {"name": "m"}}]})), "configmaps"),
        (spec(**vol(secret={})), "secrets (via secret volumes)"),
        (spec(**vol(configMap={})), "configmaps (via configmap volumes)"),
        (spec(**vol(csi={"driver": "d"})), "csidrivers (via CSI volumes)"),
        (spec(**vol(persistentVolumeClaim={"claimName": "c"})), "persistentvolumeclaims"),
        (spec(**vol(ephemeral={"volumeClaimTemplate": {}})), "persistentvolumeclaims (via ephemeral volumes)"),
        (spec(**vol(glusterfs={"endpoints": "e", "path": "p"})), "endpoints (via glusterFS volumes)"),
        (spec(**vol(projected={"sources": [{"serviceAccountToken": {"path": "t"}}]})), "serviceaccounts (via projected volumes)"),
        (spec(**vol(projected={"sources": [{"downwardAPI": {}}, {"clusterTrustBundle": {"name": "b", "path": "p"}}]})), "clustertrustbundles"),
        (spec(**vol(projected={"sources": [{"podCertificate": {"signerName": "x/y", "keyType": "ED25519", "credentialBundlePath": "c"}}]})), "podcertificates"),
        (spec(**vol(projected={"sources": [{"downwardAPI": {"items": []}}]})), None),
        (spec(**vol(hostPath={"path": "/x"})), None),
        (spec(**vol(emptyDir={})), None),
        (spec(**vol(image={"reference": "busybox:1.36"})), None),
    ],
)  # fmt: skip
def test_each_reference_is_named_as_upstream_names_it(pod_spec: dict[str, Any], want: str | None) -> None:  # fmt: skip
    assert api_reference(pod_spec) == want


def test_a_volume_it_cannot_judge_is_an_error() -> None:
    with pytest.raises(StaticPodReferenceError, match="unknown volume type for volume  'v'"):
        api_reference(spec(**vol(somethingNew={})))
    with pytest.raises(StaticPodReferenceError, match="unknown source for projected volume 'v'"):
        api_reference(spec(**vol(projected={"sources": [{"somethingNew": {}}]})))


def test_with_the_gate_off_only_claims_and_trust_bundles_are_refused() -> None:
    static_refs.check(spec(serviceAccountName="sa", **vol(configMap={"name": "m"})), False)
    with pytest.raises(StaticPodReferenceError, match=r"^static pods may not use ResourceClaims$"):
        static_refs.check(spec(resourceClaims=[{"name": "g"}]), False)
    bundle = vol(projected={"sources": [{"clusterTrustBundle": {"name": "b", "path": "p"}}]})
    with pytest.raises(StaticPodReferenceError, match="ClusterTrustBundle projected volume"):
        static_refs.check(spec(**bundle), False)


def _manifest(name: str, **pod_spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": spec(**pod_spec)})  # fmt: skip


def test_the_file_is_refused_and_its_neighbours_run(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_manifest("a", **vol(configMap={"name": "cfg"})))
    (tmp_path / "b.yaml").write_text(_manifest("b"))
    pods, errors = read_pods(str(tmp_path), "n1")
    assert [p["metadata"]["name"] for p in pods] == ["b-n1"]
    assert errors == [f"{tmp_path / 'a.yaml'}: static pods may not reference configmaps"]
    # The gate off: the same file gives its pod (the result is not a cached one).
    pods, errors = read_pods(str(tmp_path), "n1", prevent_refs=False)
    assert sorted(p["metadata"]["name"] for p in pods) == ["a-n1", "b-n1"] and errors == []
