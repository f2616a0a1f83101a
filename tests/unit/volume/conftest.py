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


def assert_intact(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["a", "sub"]
    assert (victim / "a").read_text() == "precious a"
    assert (victim / "sub" / "b").read_text() == "precious b"
    assert not (victim / "sub").is_symlink()
