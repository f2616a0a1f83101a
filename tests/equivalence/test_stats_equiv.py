"""Cython stats parsers == reference, on generated cgroup v1/v2 trees and /proc files:
valid values, huge numbers, garbage, truncated files, missing files, extra keys."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kubelet
from kubelet.stats import reference

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.stats import cgstats as native  # noqa: E402
from tests.equivalence.cgroup_files import (  # noqa: E402
    kv_file,
    maybe,
    psi_file,
    v1_tree,
    v2_tree,
    value,
)


def _write(path: Path, data: bytes | None) -> None:
    if data is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v2_tree, min_size=1, max_size=4))
def test_cgroup_v2_native_equals_reference(trees: list[dict[str, bytes | None]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        paths = []
        for i, tree in enumerate(trees):
            rel = f"kubepods/pod{i}"
            (Path(root) / rel).mkdir(parents=True)
            for name, data in tree.items():
                _write(Path(root) / rel / name, data)
            paths.append(rel)
        paths.append("does/not/exist")
        got = native.parse_cgroups(paths, 2, root)
        want = reference.parse_cgroups(paths, 2, root)
        assert got == want
        assert all(v is None for v in got[-1].as_tuple())
        # A batch big enough to be split across threads gives the same, in order.
        many = paths * 20
        assert native.parse_cgroups(many, 2, root, threads=2) == want * 20


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v1_tree, min_size=1, max_size=4))
def test_cgroup_v1_native_equals_reference(
    trees: list[dict[tuple[str, str], bytes | None]],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        paths = []
        for i, tree in enumerate(trees):
            rel = f"kubepods/burstable/pod{i}"
            for (controller, name), data in tree.items():
                _write(Path(root) / controller / rel / name, data)
            paths.append(rel)
        assert native.parse_cgroups(paths, 1, root) == reference.parse_cgroups(paths, 1, root)
        for fields in (SWAP, PSI, frozenset({"memory_rss"}) | SWAP):
            got = native.parse_cgroups(paths, 1, root, fields=fields)
            assert got == reference.parse_cgroups(paths, 1, root, fields=fields)


SWAP = frozenset({"swap_usage", "swap_limit"})
PSI = frozenset({"cpu_pressure", "memory_pressure", "io_pressure"})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v2_tree, min_size=1, max_size=3), st.sampled_from([SWAP, PSI, SWAP | PSI]))
def test_cgroup_v2_field_subsets_agree(
    trees: list[dict[str, bytes | None]], fields: frozenset[str]
) -> None:
    """Reading only the swap or pressure files gives the same as the reference."""
    with tempfile.TemporaryDirectory() as root:
        paths = []
        for i, tree in enumerate(trees):
            rel = f"pod{i}"
            (Path(root) / rel).mkdir()
            for name, data in tree.items():
                _write(Path(root) / rel / name, data)
            paths.append(rel)
        got = native.parse_cgroups(paths, 2, root, fields=fields)
        assert got == reference.parse_cgroups(paths, 2, root, fields=fields)
        assert all(v is None for k, v in got[0].as_dict().items() if k not in fields)


@settings(max_examples=150, deadline=None)
@given(maybe(psi_file()))
def test_read_psi_native_equals_reference(data: bytes | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        _write(Path(d) / "cpu", data)
        assert native.read_psi(f"{d}/cpu") == reference.read_psi(f"{d}/cpu")


proc_stat = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([b"cpu ", b"cpu  ", b"cpu0 ", b"cpu"]),
                  st.lists(value, min_size=0, max_size=10)).map(lambda t: t[0] + b" ".join(t[1])),
        kv_file(["ctxt", "processes", "procs_running", "procs_blocked", "btime"]),
    ),
    max_size=6,
).map(lambda ls: b"\n".join(ls))  # fmt: skip
meminfo = st.lists(
    st.tuples(
        st.sampled_from([b"MemTotal", b"MemFree", b"MemAvailable", b"Buffers", b"Cached",
                         b"SwapTotal", b"SwapFree", b"Shmem", b""]),
        st.sampled_from([b":", b": ", b":       ", b""]),
        value,
        st.sampled_from([b" kB", b"kB", b"", b" MB"]),
    ).map(lambda t: b"".join(t)),
    max_size=10,
).map(lambda ls: b"\n".join(ls))  # fmt: skip
loadavg = st.one_of(
    st.tuples(
        st.sampled_from([b"0.52", b"12.00", b"1.5", b"x"]),
        st.sampled_from([b"0.58", b"3.10"]),
        st.sampled_from([b"0.59", b"0.01"]),
        value, value, value,
        st.sampled_from([b"\n", b"", b"\n\n", b" "]),
    ).map(lambda t: b"%s %s %s %s/%s %s%s" % t),
    st.binary(max_size=30),
)  # fmt: skip
pid_stat = st.tuples(
    st.integers(1, 99999),
    st.sampled_from([b"(sh)", b"(a b) c)", b"(x)", b"((nested))", b"noparen"]),
    st.lists(value, max_size=30),
    st.sampled_from([b"\n", b"", b" \n"]),
).map(lambda t: b"%d %s %s%s" % (t[0], t[1], b" ".join(t[2]), t[3]))


@settings(max_examples=200, deadline=None)
@given(proc_stat, meminfo, loadavg, pid_stat)
def test_proc_parsers_native_equal_reference(
    stat: bytes, mem: bytes, load: bytes, pstat: bytes
) -> None:
    with tempfile.TemporaryDirectory() as d:
        for name, data in (("stat", stat), ("meminfo", mem), ("loadavg", load)):
            Path(d, name).write_bytes(data)
        Path(d, "42").mkdir()
        Path(d, "42", "stat").write_bytes(pstat)
        assert native.read_proc_stat(f"{d}/stat") == reference.read_proc_stat(f"{d}/stat")
        assert native.read_meminfo(f"{d}/meminfo") == reference.read_meminfo(f"{d}/meminfo")
        assert native.read_loadavg(f"{d}/loadavg") == reference.read_loadavg(f"{d}/loadavg")
        assert native.read_pid_stat(42, d) == reference.read_pid_stat(42, d)
        assert native.read_pid_stat(43, d) is None and reference.read_pid_stat(43, d) is None


def test_real_proc_and_fs_agree() -> None:
    assert native.read_meminfo() == reference.read_meminfo()
    # The node's pressure, read for real (PSI is on in this kernel): both parse it.
    for res in ("cpu", "memory", "io"):
        got = native.read_psi(f"/proc/pressure/{res}")
        if os.path.exists(f"/proc/pressure/{res}"):
            assert got is not None and got[0] is not None, res
            assert 0.0 <= got[0][0] <= 100.0 and got[0][3] >= 0
        assert reference.read_psi(f"/proc/pressure/{res}") is not None or got is None
    me = os.getpid()
    n, r = native.read_pid_stat(me), reference.read_pid_stat(me)
    assert n is not None and r is not None
    assert n["num_threads"] == r["num_threads"] and n["starttime"] == r["starttime"]
    assert native.fs_usage("/") is not None
    assert native.fs_usage("/does/not/exist") is None
    a, b = native.fs_usage("/"), reference.fs_usage("/")
    assert a is not None and b is not None and a["capacity"] == b["capacity"]


def test_big_files_and_odd_paths_agree(tmp_path: Path) -> None:
    """Files past the 64 KiB read buffer (it must grow), a name that is not UTF-8,
    a NUL in a path (all fields None, never a raise), a file where a dir should be."""
    big = tmp_path / "big"
    big.mkdir()
    (big / "memory.stat").write_bytes(
        b"".join(b"k%d %d\n" % (i, i) for i in range(30000)) + b"inactive_file 77\nanon 5\n"
    )
    (big / "memory.current").write_bytes(b"100\n")
    (big / "io.stat").write_bytes(b"8:0 rbytes=1 wbytes=2 rios=3 wios=4\n" * 5000)
    odd = os.fsdecode(b"pod\xff")
    (tmp_path / odd).mkdir()
    (tmp_path / odd / "pids.current").write_bytes(b"3\n")
    (tmp_path / "file").write_bytes(b"x")
    paths = ["big", odd, "big\x00", "file", ""]
    got = native.parse_cgroups(paths, 2, str(tmp_path))
    assert got == reference.parse_cgroups(paths, 2, str(tmp_path))
    assert got[0].memory_inactive_file == 77 and got[0].io_read_ops == 15000
    assert got[1].pids_current == 3
    assert all(v is None for v in got[2].as_tuple())
    assert native.parse_cgroups(["big"], 1, str(tmp_path) + "\x00") == reference.parse_cgroups(
        ["big"], 1, str(tmp_path) + "\x00"
    )
    for fn in ("read_proc_stat", "read_meminfo", "read_loadavg", "fs_usage"):
        bad = str(tmp_path / "x\x00")
        assert getattr(native, fn)(bad) is None and getattr(reference, fn)(bad) is None
