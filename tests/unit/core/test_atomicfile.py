import os
import ssl
from pathlib import Path

import pytest

from kubelet.server.tls import ensure_self_signed
from kubelet.util.atomicfile import write_atomic


def test_replaces_whole_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "state"
    p.write_bytes(b"old content that is longer")
    write_atomic(str(p), b"new", 0o640)
    assert p.read_bytes() == b"new"
    assert p.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["state"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "state"
    p.write_bytes(b"old")

    def full(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(str(p), b"x" * 10)
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state"]


@pytest.mark.parametrize("torn", ["kubelet.crt", "kubelet.key"])
def test_a_torn_self_signed_pair_is_made_again(tmp_path: Path, torn: str, caplog) -> None:  # type: ignore[no-untyped-def]
    cert, key = ensure_self_signed(str(tmp_path), "node-a", ["10.0.0.1"])
    first = Path(cert).read_bytes()
    victim = tmp_path / torn
    victim.write_bytes(victim.read_bytes()[:40])  # truncated mid-write
    cert2, key2 = ensure_self_signed(str(tmp_path), "node-a", ["10.0.0.1"])
    assert (cert2, key2) == (cert, key)
    assert Path(cert).read_bytes() != first
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)  # usable again
    assert "unusable" in caplog.text and "generating a new one" in caplog.text


def test_a_sound_pair_is_kept(tmp_path: Path) -> None:
    cert, _key = ensure_self_signed(str(tmp_path), "node-a", [])
    before = Path(cert).read_bytes()
    ensure_self_signed(str(tmp_path), "node-a", [])
    assert Path(cert).read_bytes() == before
