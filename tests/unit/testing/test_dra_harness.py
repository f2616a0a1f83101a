"""The DRA harness takes /var/lib/kubelet only when nothing there is in use:
a stopped kubelet's leftover socket and empty directories do not count, a
regular file or a socket someone listens on does."""

from __future__ import annotations

import socket
from pathlib import Path

from benches.dra.harness import _in_use


def test_leftover_sockets_and_empty_directories_leave_the_root_free(tmp_path: Path) -> None:
    (tmp_path / "device-plugins").mkdir()
    stale = tmp_path / "device-plugins" / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # bound, closed: nobody listens any more
    (tmp_path / "plugins_registry").mkdir()
    assert _in_use(tmp_path) == []
    assert _in_use(tmp_path / "absent") == []


def test_files_and_live_sockets_mean_another_kubelet(tmp_path: Path) -> None:
    (tmp_path / "pods").mkdir()
    live = tmp_path / "pod-resources.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(live))
        s.listen(1)
        assert _in_use(tmp_path) == [str(live)]
    (tmp_path / "cpu_manager_state").write_text("{}")
    assert str(tmp_path / "cpu_manager_state") in _in_use(tmp_path)
