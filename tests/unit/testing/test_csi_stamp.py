"""The CSI driver fixture refuses a driver built from other sources: its stamp
is the one hack/parts/csi.sh computes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kubelet.testing import csi


def shell_stamp(src: Path) -> str:
    # The pipeline of hack/parts/csi.sh.
    return subprocess.run(
        "find . -type f \\( -name '*.go' -o -name go.mod -o -name go.sum \\) -print0"
        " | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16",
        shell=True, cwd=src, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def test_the_stamp_is_csi_sh_s(tmp_path: Path) -> None:
    (tmp_path / "cmd" / "Drv_x").mkdir(parents=True)
    (tmp_path / "cmd" / "drv-a").mkdir(parents=True)
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "cmd" / "Drv_x" / "main.go").write_text("package main\n")
    (tmp_path / "cmd" / "drv-a" / "main.go").write_text("package main // a\n")
    (tmp_path / "README.md").write_text("not hashed")
    assert csi.source_stamp(str(tmp_path)) == shell_stamp(tmp_path)
    assert csi.source_stamp(csi.OURS_SRC) == shell_stamp(Path(csi.OURS_SRC))


def test_a_driver_built_from_other_sources_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "csi-parts" / "bin"
    bin_dir.mkdir(parents=True)
    drv = bin_dir / "csi-hostpath"
    drv.write_text("#!/bin/sh\n")
    os.chmod(drv, 0o755)
    monkeypatch.setenv("KUBELET_CACHE", str(tmp_path))
    (bin_dir / ".ours.stamp").write_text("0123456789abcdef\n")
    with pytest.raises(csi.Unavailable, match="built from other sources"):
        csi.binary("csi-hostpath")
    (bin_dir / ".ours.stamp").write_text(f"{csi.source_stamp()}\n")
    assert csi.binary("csi-hostpath") == str(drv)
