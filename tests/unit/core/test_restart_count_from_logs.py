from pathlib import Path

from kubelet.kuberuntime.kuberuntime_container import restart_count_from_log_dir


def test_one_past_the_highest_log_file(tmp_path: Path) -> None:
    assert restart_count_from_log_dir(str(tmp_path / "missing")) == 0
    assert restart_count_from_log_dir(str(tmp_path)) == 0
    for name in ("0.log", "2.log.20261123-101010", "notes.txt", "x3.log"):
        (tmp_path / name).write_text("")
    (tmp_path / "7.log").mkdir()  # a directory is no log file
    assert restart_count_from_log_dir(str(tmp_path)) == 3
