"""Stats parsers on hand-written cgroup trees and /proc files, with exact values.
Runs against the implementation KUBELET_IMPL selects (Cython or reference)."""

from __future__ import annotations

import os
from pathlib import Path

from kubelet import stats

V2 = {
    "cpu.stat": "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 10\n"
    "nr_throttled 2\nthrottled_usec 300\nnr_bursts 0\n",
    "memory.current": "1048576\n",
    "memory.max": "max\n",
    "memory.stat": "anon 4096\nfile 8192\nkernel 0\ninactive_file 2097152\n"
    "pgfault 11\npgmajfault 1\n",
    "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    "io.stat": "8:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0\n"
    "259:0 rbytes=5 wbytes=5 rios=1 wios=1 dbytes=0 dios=0\n",
    "pids.current": "7\n",
    "pids.max": "1024\n",
    "cpu.pressure": "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_cgroup_v2_values(tmp_path: Path) -> None:
    write_tree(tmp_path / "kubepods" / "podA", V2)
    (s,) = stats.parse_cgroups(["kubepods/podA"], 2, str(tmp_path))
    assert (s.cpu_usage_ns, s.cpu_user_ns, s.cpu_system_ns) == (1_500_000, 1_000_000, 500_000)
    assert (s.cpu_nr_periods, s.cpu_nr_throttled, s.cpu_throttled_ns) == (10, 2, 300_000)
    assert s.memory_usage == 1048576
    assert s.memory_working_set == 0  # usage below inactive_file: floored at 0, as upstream
    assert (s.memory_rss, s.memory_cache, s.memory_inactive_file) == (4096, 8192, 2097152)
    assert s.memory_limit is None  # "max"
    assert (s.memory_oom_kill, s.pgfault, s.pgmajfault) == (1, 11, 1)
    assert (s.io_read_bytes, s.io_write_bytes, s.io_read_ops, s.io_write_ops) == (105, 205, 2, 3)
    assert (s.pids_current, s.pids_max) == (7, 1024)
    assert s.cpu_pressure == ((1.5, 0.25, 0.0, 12345), (0.0, 0.0, 0.0, 0))
    assert s.memory_pressure is None and s.io_pressure is None  # files absent


def test_cgroup_v1_values_and_unlimited(tmp_path: Path) -> None:
    rel = "kubepods/burstable/podB"
    files = {
        f"cpuacct/{rel}/cpuacct.usage": "123456789\n",
        f"cpuacct/{rel}/cpuacct.stat": "user 150\nsystem 50\n",
        f"cpu/{rel}/cpu.stat": "nr_periods 4\nnr_throttled 1\nthrottled_time 999\n",
        f"memory/{rel}/memory.usage_in_bytes": "10000\n",
        f"memory/{rel}/memory.limit_in_bytes": f"{2**62}\n",
        f"memory/{rel}/memory.stat": "cache 1\nrss 2\ntotal_cache 300\ntotal_rss 400\n"
        "total_inactive_file 2500\npgfault 9\n",
        f"memory/{rel}/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        f"blkio/{rel}/blkio.throttle.io_service_bytes": "8:0 Read 10\n8:0 Write 20\n"
        "8:0 Sync 30\n8:16 Read 1\nTotal 61\n",
        f"blkio/{rel}/blkio.throttle.io_serviced": "8:0 Read 1\n8:0 Write 2\nTotal 3\n",
        f"pids/{rel}/pids.current": "3\n",
        f"pids/{rel}/pids.max": "max\n",
    }
    write_tree(tmp_path, files)
    (s,) = stats.parse_cgroups([rel], 1, str(tmp_path))
    assert s.cpu_usage_ns == 123456789
    assert (s.cpu_user_ns, s.cpu_system_ns) == (1_500_000_000, 500_000_000)  # USER_HZ ticks
    assert (s.cpu_nr_periods, s.cpu_nr_throttled, s.cpu_throttled_ns) == (4, 1, 999)
    assert s.memory_limit is None  # 2**62 and above: no limit
    assert (s.memory_rss, s.memory_cache) == (400, 300)  # total_* win over the local keys
    assert s.pgfault == 9  # no total_pgfault: the local key
    assert s.memory_working_set == 10000 - 2500
    assert s.memory_oom_kill == 2
    assert (s.io_read_bytes, s.io_write_bytes, s.io_read_ops, s.io_write_ops) == (11, 20, 1, 2)
    assert (s.pids_current, s.pids_max) == (3, None)
    # One below the unlimited mark is a real limit.
    (tmp_path / f"memory/{rel}/memory.limit_in_bytes").write_text(f"{2**62 - 1}\n")
    assert stats.parse_cgroups([rel], 1, str(tmp_path))[0].memory_limit == 2**62 - 1


def test_bad_files_give_absent_fields_and_never_stop_the_batch(tmp_path: Path) -> None:
    write_tree(tmp_path / "a", V2)
    write_tree(
        tmp_path / "b",
        {
            "cpu.stat": "usage_usec -5\nuser_usec 12x\nsystem_usec 9223372036854775808\n"
            "nr_periods 3",  # truncated: no final newline, still a whole number
            "memory.current": "",
            "memory.max": "maxx\n",
            "memory.stat": "\x00\xff garbage\ninactive_file 5\ninactive_file 7\n",
            "pids.current": "1 2\n",
            "cpu.pressure": "some avg10=1.5 avg60=0.00 avg300=0.00 total=1\n",
        },
    )
    os.mkdir(tmp_path / "c")
    (tmp_path / "c" / "memory.current").mkdir()  # a directory where a file should be
    a, b, c, d = stats.parse_cgroups(["a", "b", "c", "missing"], 2, str(tmp_path))
    assert a.memory_usage == 1048576
    assert (b.cpu_usage_ns, b.cpu_user_ns, b.cpu_system_ns) == (None, None, None)
    assert b.cpu_nr_periods == 3
    assert b.memory_usage is None and b.memory_working_set is None
    assert b.memory_limit is None and b.memory_inactive_file == 5  # the first one wins
    assert b.pids_current is None
    assert b.cpu_pressure == (None, None)  # present, but no valid line
    assert c.memory_usage is None
    assert all(v is None for v in d.as_tuple())


def test_unit_conversion_overflow_is_absent(tmp_path: Path) -> None:
    write_tree(
        tmp_path / "x", {"cpu.stat": f"usage_usec {2**63 - 1}\nuser_usec 9223372036854775\n"}
    )
    (s,) = stats.parse_cgroups(["x"], 2, str(tmp_path))
    assert s.cpu_usage_ns is None  # * 1000 would pass 2**63-1
    assert s.cpu_user_ns == 9223372036854775000


def test_proc_files(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(
        "cpu  10 20 30 40 50 60 70 80 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nctxt 99\n"
        "btime 1\nprocesses 5\nprocs_running 2\nprocs_blocked 0\n"
    )
    assert stats.read_proc_stat(str(tmp_path / "stat")) == {
        "cpu": (10, 20, 30, 40, 50, 60, 70, 80),
        "ctxt": 99,
        "processes": 5,
        "procs_running": 2,
        "procs_blocked": 0,
    }
    (tmp_path / "meminfo").write_text("MemTotal:       2048 kB\nMemFree: 1024 kB\nCached: 1 MB\n")
    mi = stats.read_meminfo(str(tmp_path / "meminfo"))
    assert mi is not None
    assert mi["MemTotal"] == 2048 * 1024 and mi["MemFree"] == 1024 * 1024
    assert mi["Cached"] is None and mi["SwapTotal"] is None
    (tmp_path / "loadavg").write_text("0.52 1.50 10.00 3/456 7890\n")
    assert stats.read_loadavg(str(tmp_path / "loadavg")) == (0.52, 1.5, 10.0, 3, 456)
    (tmp_path / "7").mkdir()
    fields = " ".join(str(i) for i in range(3, 40))
    (tmp_path / "7" / "stat").write_text(f"7 (we ird) name) S {fields[2:]}\n")
    ps = stats.read_pid_stat(7, str(tmp_path))
    assert ps == {"utime": 14, "stime": 15, "num_threads": 20, "starttime": 22, "vsize": 23,
                  "rss": 24}  # fmt: skip
    assert stats.read_pid_stat(8, str(tmp_path)) is None


def test_real_system_files() -> None:
    mi = stats.read_meminfo()
    assert mi is not None and mi["MemTotal"] and mi["MemTotal"] > 64 * 2**20
    me = stats.read_pid_stat(os.getpid())
    assert me is not None and me["num_threads"] and me["num_threads"] >= 1
    ps = stats.read_proc_stat()
    assert ps is not None and ps["cpu"] is not None and ps["cpu"][3] > 0
    fs = stats.fs_usage("/")
    assert fs is not None and fs["capacity"] >= fs["used"] > 0


def test_fs_usage_on_tmp_dir(tmp_path: Path) -> None:
    fs = stats.fs_usage(str(tmp_path))
    assert fs is not None
    assert fs["capacity"] > 0 and 0 <= fs["available"] <= fs["capacity"]
    assert 0 <= fs["used"] <= fs["capacity"]
    assert fs["inodes_used"] == fs["inodes"] - fs["inodes_free"]
    assert stats.fs_usage(str(tmp_path / "missing")) is None
