"""The containerd harness's two runtimes: which binaries each uses, and the
config each is given (containerd 2's version 3 format, 1.6's version 2)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from kubelet.testing import containerd as ctd
from kubelet.testing import images

REPO = Path(__file__).resolve().parents[3]


def test_pins_agree_with_the_build_script() -> None:
    script = (REPO / "hack/parts/containerd2.sh").read_text()
    pins = dict(re.findall(r'^(\w+)="\$\{\w+:-(v[0-9.]+)\}"$', script, re.M))
    assert pins["CONTAINERD2_VERSION"] == ctd.CONTAINERD2_VERSION
    assert pins["RUNC_VERSION"] == ctd.RUNC_VERSION


def test_flavor_comes_from_the_environment_and_a_bad_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KPY_CONTAINERD", raising=False)
    assert ctd.default_flavor() == "2"
    monkeypatch.setenv("KPY_CONTAINERD", "1.6")
    assert ctd.default_flavor() == "1.6"
    monkeypatch.setenv("KPY_CONTAINERD", "1.7")
    with pytest.raises(ValueError, match=r"KPY_CONTAINERD=.1\.7."):
        ctd.default_flavor()


def test_containerd2_parts_come_from_the_cache_and_say_how_to_build_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBELET_CACHE", str(tmp_path))
    with pytest.raises(ctd.Unavailable, match=r"hack/parts/containerd2\.sh"):
        ctd.parts("2")
    bins = tmp_path / f"containerd-{ctd.CONTAINERD2_VERSION}" / "bin"
    bins.mkdir(parents=True)
    (tmp_path / f"runc-{ctd.RUNC_VERSION}").mkdir()
    for f in (bins / "containerd", bins / "containerd-shim-runc-v2", bins / "ctr",
              tmp_path / f"runc-{ctd.RUNC_VERSION}" / "runc"):  # fmt: skip
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    p = ctd.parts("2")
    assert p.containerd == str(bins / "containerd")
    assert p.runc == str(tmp_path / f"runc-{ctd.RUNC_VERSION}" / "runc")


def _fake_parts(tmp_path: Path) -> ctd.Parts:
    return ctd.Parts("2", "/x/containerd", "/x/containerd-shim-runc-v2", "/x/ctr", "/y/runc")


def test_containerd2_config_is_version_3_with_every_setting_the_machine_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctd, "CNI_BIN_DIRS", (str(tmp_path / "cni"),))
    (tmp_path / "cni").mkdir()
    (tmp_path / "cni" / "bridge").write_text("")
    c = ctd.Containerd(str(tmp_path / "d"), flavor="2", bins=_fake_parts(tmp_path))
    c.socket = str(tmp_path / "d" / "ctd.sock")
    cfg = tomllib.loads(c.config())
    assert cfg["version"] == 3
    assert cfg["grpc"]["address"] == c.socket
    plugins = cfg["plugins"]
    im = plugins["io.containerd.cri.v1.images"]
    assert im["snapshotter"] == "overlayfs"
    assert im["pinned_images"]["sandbox"] == images.PAUSE_REF
    assert im["registry"]["config_path"] == f"{c.directory}/certs.d"
    rt = plugins["io.containerd.cri.v1.runtime"]
    assert rt["restrict_oom_score_adj"] is True
    runc = rt["containerd"]["runtimes"]["runc"]
    assert rt["containerd"]["default_runtime_name"] == "runc"
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["runtime_path"] == "/x/containerd-shim-runc-v2"
    assert runc["options"] == {"BinaryName": "/y/runc", "SystemdCgroup": False}
    assert rt["cni"] == {"bin_dirs": [str(tmp_path / "cni")], "conf_dir": f"{c.directory}/cni/conf"}
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    # The v2-format CRI table is gone: containerd 2 would warn and migrate it.
    assert "io.containerd.grpc.v1.cri" not in plugins
    conflist = (tmp_path / "d" / "cni" / "conf" / "10-kubelet-py.conflist").read_text()
    assert c.subnet in conflist and c.bridge in conflist


def test_containerd16_config_keeps_the_version_2_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ctd, "CNI_BIN_DIRS", (str(tmp_path / "cni"),))
    (tmp_path / "cni").mkdir()
    (tmp_path / "cni" / "bridge").write_text("")
    bins = ctd.Parts("1.6", "/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2",
                     "/usr/bin/ctr", "/usr/sbin/runc")  # fmt: skip
    c = ctd.Containerd(str(tmp_path / "d"), flavor="1.6", bins=bins)
    cfg = tomllib.loads(c.config())
    assert cfg["version"] == 2
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == images.PAUSE_REF and cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
