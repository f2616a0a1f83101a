"""userNamespaces.idsPerPod and the UserNamespacesSupport gate through the
real configuration path and composition: validated with upstream's messages,
honoured by the manager, and a range that cannot serve refuses the start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubelet.cmd.kubelet import UsageError, build_server
from kubelet.cri.fake import FakeImageService, FakeRuntimeService
from kubelet.kubelet import Kubelet
from kubelet.userns import idrange
from kubelet.userns.userns_manager import UsernsError


def server(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + body)
    return build_server([f"--config={cfg}"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "userNamespaces.idsPerPod must not be less than 65536"),
        (1000, "userNamespaces.idsPerPod must not be less than 65536"),
        (65536 + 1, "userNamespaces.idsPerPod must be a multiple of 65536"),
        (2**32, "userNamespaces.idsPerPod must not be more than 4294967295"),
    ],
)
def test_ids_per_pod_is_validated_as_upstream(tmp_path: Path, value: int, message: str) -> None:
    with pytest.raises(UsageError) as e:
        server(tmp_path, f"userNamespaces:\n  idsPerPod: {value}\n")
    assert f"invalid configuration: {message}" in e.value.problems


def test_ids_per_pod_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubelet range aligned to 131072: every pod gets 131072 IDs."""
    monkeypatch.setattr(idrange, "kubelet_mappings", lambda: (131072, 131072 * 200))
    s, _, _ = server(tmp_path, "userNamespaces:\n  idsPerPod: 131072\n")
    assert s is not None and s.config.user_namespaces.ids_per_pod == 131072
    k = Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    assert k.runtime.userns.ids_per_pod == 131072 and k.runtime.userns.free_slots == 200
    # /configz serves what is in force; unset, the struct is left out as upstream's nil
    from kubelet.apis.config.v1beta1 import encode

    assert encode(s.config)["userNamespaces"] == {"idsPerPod": 131072}
    s2, _, _ = server(tmp_path, "")
    assert s2 is not None and "userNamespaces" not in encode(s2.config)


def test_the_default_range_refuses_a_larger_ids_per_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's default range starts at 65536, which is no multiple of 131072:
    the kubelet does not start (run.py turns this into exit 1). The node is
    made one without a kubelet user, whatever this machine has."""
    default = (idrange.DEFAULT_FIRST_ID, idrange.DEFAULT_LENGTH)
    monkeypatch.setattr(idrange, "kubelet_mappings", lambda: default)
    s, _, _ = server(tmp_path, "userNamespaces:\n  idsPerPod: 131072\n")
    assert s is not None
    with pytest.raises(idrange.IDRangeError) as e:
        Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    assert str(e.value) == (
        "create user namespace manager: kubelet user assigned ID 65536 is not a multiple of 131072"
    )


def test_max_pods_beyond_the_range_refuses_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idrange, "kubelet_mappings", lambda: (65536, 65536 * 100))
    s, _, _ = server(tmp_path, "maxPods: 101\n")
    assert s is not None
    with pytest.raises(idrange.IDRangeError, match="not enough to support 101 pods"):
        Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
    # with the gate off nothing is allocated, and nothing is checked
    s, _, _ = server(tmp_path, "maxPods: 101\nfeatureGates:\n  UserNamespacesSupport: false\n")
    assert s is not None
    Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())


def test_a_restarted_kubelet_refuses_overlapping_pod_files(tmp_path: Path) -> None:
    one = [{"hostId": 131072, "containerId": 0, "length": 65536}]
    for u in ("a", "b"):
        d = tmp_path / "pods" / u
        d.mkdir(parents=True)
        (d / "userns").write_text(json.dumps({"uidMappings": one, "gidMappings": one}))
    s, _, _ = server(tmp_path, "")
    assert s is not None
    with pytest.raises(UsernsError, match="already taken"):
        Kubelet(s.config, "n1", str(tmp_path), FakeRuntimeService(), FakeImageService())
