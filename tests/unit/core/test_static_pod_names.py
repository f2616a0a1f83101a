"""Static pods: everything a host path is built from (uid, name, namespace,
volume and container names) is checked before the pod goes anywhere; a bad
manifest is logged with its file and skipped, the other static pods run on."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.config.common import ManifestError, apply_defaults
from kubelet.config.config import Op, PodConfig
from kubelet.config.file import FileSource

NODE = "n1"


def pod(
    name: str = "web",
    uid: Any = None,
    namespace: Any = None,
    volumes: list[Any] | None = None,
    mounts: list[Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if uid is not None:
        md["uid"] = uid
    if namespace is not None:
        md["namespace"] = namespace
    c: dict[str, Any] = {"name": "c", "image": "busybox"}
    if mounts is not None:
        c["volumeMounts"] = mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {"containers": [c], **({"volumes": volumes} if volumes else {}), **spec},
    }


def scratch(name: str) -> dict[str, Any]:
    return {"name": name, "emptyDir": {}}


BAD = {
    "uid-backsteps": (pod(uid="../../../../etc"), "metadata.uid: Invalid value"),
    "uid-dotdot-inside": (pod(uid="a..b"), "metadata.uid: Invalid value"),
    "uid-slash": (pod(uid="a/b"), "metadata.uid: Invalid value"),
    "uid-dot": (pod(uid="."), "metadata.uid: Invalid value"),
    "uid-underscore": (pod(uid="a_b"), "metadata.uid: Invalid value"),  # the log dir's separator
    "uid-nul": (pod(uid="a\0b"), "metadata.uid: Invalid value"),
    "uid-long": (pod(uid="a" * 129), "metadata.uid: Invalid value"),
    "uid-number": (pod(uid=12), "metadata.uid: must be a string"),
    "name-slash": (pod(name="a/b"), "metadata.name: Invalid value"),
    "name-dotdot": (pod(name=".."), "metadata.name: Invalid value"),
    "name-newline": (pod(name="web\n"), "metadata.name: Invalid value"),
    "name-too-long-with-node": (pod(name="a" * 252), "metadata.name: Invalid value"),
    "namespace-backsteps": (pod(namespace="../x"), "metadata.namespace: Invalid value"),
    "namespace-newline": (pod(namespace="kube-system\n"), "metadata.namespace: Invalid value"),
    "namespace-underscore": (pod(namespace="a_b"), "metadata.namespace: Invalid value"),
    "volume-backsteps": (
        pod(volumes=[scratch("../../x")]),
        "spec.volumes[0].name: Invalid value",
    ),
    "volume-slash": (pod(volumes=[scratch("a/b")]), "spec.volumes[0].name: Invalid value"),
    "volume-dots": (pod(volumes=[scratch("..")]), "spec.volumes[0].name: Invalid value"),
    "volume-missing-name": (pod(volumes=[{"emptyDir": {}}]), "spec.volumes[0].name: Required"),
    "volume-duplicate": (
        pod(volumes=[scratch("v"), scratch("v")]),
        "spec.volumes[1].name: Duplicate value",
    ),
    "mount-of-no-volume": (
        pod(mounts=[{"name": "../../x", "mountPath": "/x"}]),
        "spec.containers[0].volumeMounts[0].name: Not found",
    ),
    "mount-without-path": (
        pod(volumes=[scratch("v")], mounts=[{"name": "v"}]),
        "spec.containers[0].volumeMounts[0].mountPath: Required value",
    ),
    "container-backsteps": (
        {**pod(), "spec": {"containers": [{"name": "../c", "image": "b"}]}},
        "spec.containers[0].name: Invalid value",
    ),
    "ephemeral-containers": (
        pod(ephemeralContainers=[{"name": "e", "image": "b"}]),
        "spec.ephemeralContainers: Forbidden",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_names_are_refused_before_any_path_is_built(case: str) -> None:
    manifest, message = BAD[case]
    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        apply_defaults(manifest, "/etc/kubernetes/manifests/x.yaml", "file", NODE)


def test_good_names_pass() -> None:
    for uid in (None, "3f1c9e3a-4b1e-4c1a-9d8e-0a1b2c3d4e5f", "my.static-pod1", "A1"):
        p = apply_defaults(
            pod(uid=uid, namespace="kube-system", volumes=[scratch("data-1")],
                mounts=[{"name": "data-1", "mountPath": "/d"}]),
            "/m/x.yaml", "file", NODE,
        )  # fmt: skip
        assert p["metadata"]["name"] == "web-n1"


async def test_a_bad_manifest_is_logged_and_skipped_the_others_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for case, (manifest, _) in BAD.items():
        (tmp_path / f"{case}.yaml").write_text(yaml.safe_dump(manifest))
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(pod(name="good", uid="good-1")))
    cfg = PodConfig()
    with caplog.at_level(logging.ERROR):
        await FileSource(str(tmp_path), NODE, 60, cfg).read_once()
    update = cfg.updates.get_nowait()
    assert update.op is Op.ADD
    assert [p["metadata"]["name"] for p in update.pods] == ["good-n1"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for case, (_, message) in BAD.items():
        line = next(x for x in logged.splitlines() if f"{case}.yaml" in x)
        assert line.startswith("Could not process manifest file") and message in line
    assert not os.path.exists(tmp_path / "etc")
