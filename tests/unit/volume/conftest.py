"""What the filesystem attack tests share: a directory outside every volume
that nothing the kubelet does may touch."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    (v / "sub").mkdir(parents=True)
    (v / "a").write_text("precious a")
    (v / "sub" / "b").write_text("precious b")
    return v
