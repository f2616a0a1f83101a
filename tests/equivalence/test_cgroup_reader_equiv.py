"""The Cython CgroupReader (descriptors kept open, one pread per file) == its
pure-Python twin (opens every file every time) and == a fresh parse_cgroups,
while the tree changes under it the ways cgroups change: counters rewritten in
place, a cgroup removed, re-created under the same name (with other values or
fewer files), a file appearing (a controller enabled), cgroups dropped from the
wanted set (retain) and the budget handed to others. Field sets (parse_cgroups
fields=) are checked on the same trees. One test runs on the real cgroup v2
filesystem, where a removed cgroup's kept descriptor answers ENODEV."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kubelet
from kubelet.stats import reference
from kubelet.stats.types import CADVISOR, EVICTION, FIELDS, RESOURCE_METRICS, SUMMARY, files_of

pytestmark = pytest.mark.skipif(kubelet.__impl__ != "native", reason="needs the native module")

from kubelet.stats import cgstats as native  # noqa: E402
from tests.equivalence.cgroup_files import V2_FILES, v1_tree, v2_tree  # noqa: E402

K = 5  # cgroups in a tree
# Trees in memory when there is a tmpfs (thousands of small files per test).
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
field_sets = st.one_of(
    st.none(),
    st.sampled_from([EVICTION, RESOURCE_METRICS, SUMMARY, CADVISOR, frozenset()]),
    st.frozensets(st.sampled_from(FIELDS), max_size=6),
)
op = st.one_of(
    st.tuples(st.just("rewrite"), st.integers(0, K - 1), st.sampled_from(sorted(V2_FILES)),
              st.data()),
    st.tuples(st.just("remove"), st.integers(0, K - 1)),
    st.tuples(st.just("recreate"), st.integers(0, K - 1), v2_tree),
    st.tuples(st.just("read"), st.lists(st.integers(0, K), min_size=1, max_size=8)),
    st.tuples(st.just("read_subset"), st.lists(st.integers(0, K), min_size=1, max_size=8)),
    st.tuples(st.just("retain"), st.frozensets(st.integers(0, K))),
)  # fmt: skip


def _put(d: Path, files: dict[str, bytes | None]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if data is not None:
            (d / name).write_bytes(data)


def _rewrite(path: Path, data: bytes) -> None:
    # In place (same inode), as the kernel changes a cgroup file's contents.
    with open(path, "r+b" if path.exists() else "wb") as fh:
        fh.truncate(0)
        fh.write(data)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(v2_tree, min_size=K, max_size=K),
    field_sets,
    st.integers(0, 40),
    st.lists(op, min_size=1, max_size=14),
    st.booleans(),
)
def test_reader_equals_reference_through_changes(
    trees: list[dict[str, bytes | None]],
    fields: frozenset[str] | None,
    max_fds: int,
    ops: list[tuple[Any, ...]],
    keep_some: bool,
) -> None:
    with tempfile.TemporaryDirectory(dir=SHM) as root:
        rels = [f"kubepods/pod{i}" for i in range(K)] + ["kubepods/never"]
        for i, t in enumerate(trees):
            _put(Path(root) / rels[i], t)
        # Some files kept open, the others opened on each read.
        keep = frozenset(sorted(fields)[::2]) if keep_some and fields else None
        ours = native.CgroupReader(2, root, fields=fields, max_fds=max_fds, keep=keep)
        ref = reference.CgroupReader(2, root, fields=fields, max_fds=max_fds, keep=keep)
        assert ours.capacity == ref.capacity
        try:
            for o in [*ops, ("read", list(range(K + 1)))]:
                kind = o[0]
                if kind == "rewrite":
                    _, i, name, data = o
                    d = Path(root) / rels[int(i)]
                    if d.is_dir():
                        _rewrite(d / str(name), data.draw(V2_FILES[str(name)]))
                elif kind == "remove":
                    shutil.rmtree(Path(root) / rels[int(o[1])], ignore_errors=True)
                elif kind == "recreate":
                    d = Path(root) / rels[int(o[1])]
                    shutil.rmtree(d, ignore_errors=True)
                    _put(d, o[2])
                elif kind in ("read", "read_subset"):
                    paths = [rels[i] for i in o[1]]
                    sub = None
                    if kind == "read_subset" and fields is not None:
                        sub = frozenset(sorted(fields)[: len(fields) // 2])
                    got = ours.read(paths, sub)
                    assert got == ref.read(paths, sub)
                    want_fields = fields if sub is None else sub
                    assert got == reference.parse_cgroups(paths, 2, root, fields=want_fields)
                    assert ours.kept == ref.kept
                else:
                    wanted = {rels[i] for i in o[1]}
                    ours.retain(wanted)
                    ref.retain(wanted)
                    assert ours.kept == ref.kept
            assert ours.open_fds <= max(max_fds, 0)
        finally:
            ours.close()
        assert ours.open_fds == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v2_tree, min_size=1, max_size=3), field_sets)
def test_field_sets_v2(trees: list[dict[str, bytes | None]], fields: frozenset[str] | None) -> None:
    with tempfile.TemporaryDirectory(dir=SHM) as root:
        paths = []
        for i, t in enumerate(trees):
            _put(Path(root) / f"p{i}", t)
            paths.append(f"p{i}")
        got = native.parse_cgroups(paths, 2, root, fields=fields)
        assert got == reference.parse_cgroups(paths, 2, root, fields=fields)
        full = reference.parse_cgroups(paths, 2, root)
        names = set(FIELDS if fields is None else fields)
        for g, f in zip(got, full, strict=True):
            for k in FIELDS:  # a field asked for reads as in a full parse; others are None
                assert getattr(g, k) == (getattr(f, k) if k in names else None)
        # The floor reads exactly the files of the field set.
        want = sum(
            len((Path(root) / p / n).read_bytes())
            for p in paths
            for n in files_of(fields)
            if (Path(root) / p / n).is_file()
        )
        assert (
            native.floor_read(paths, root, fields)
            == want
            == reference.floor_read(paths, root, fields)
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v1_tree, min_size=1, max_size=3), field_sets)
def test_field_sets_v1(
    trees: list[dict[tuple[str, str], bytes | None]], fields: frozenset[str] | None
) -> None:
    with tempfile.TemporaryDirectory(dir=SHM) as root:
        paths = []
        for i, t in enumerate(trees):
            for (controller, name), data in t.items():
                if data is not None:
                    (Path(root) / controller / f"p{i}").mkdir(parents=True, exist_ok=True)
                    (Path(root) / controller / f"p{i}" / name).write_bytes(data)
            paths.append(f"p{i}")
        got = native.parse_cgroups(paths, 1, root, fields=fields)
        assert got == reference.parse_cgroups(paths, 1, root, fields=fields)
        r = native.CgroupReader(1, root, fields=fields, max_fds=1000)
        assert r.read(paths) == got and r.capacity == 0


def test_unknown_field_and_wider_read_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown cgroup stats fields"):
        native.parse_cgroups(["x"], 2, str(tmp_path), fields={"cpu_usage"})
    r = native.CgroupReader(2, str(tmp_path), fields=EVICTION, max_fds=10)
    with pytest.raises(ValueError, match="outside the reader"):
        r.read(["x"], SUMMARY)
    with pytest.raises(ValueError, match="outside the reader"):
        native.CgroupReader(2, str(tmp_path), fields=EVICTION, keep=SUMMARY)
    with pytest.raises(ValueError, match="outside the reader"):
        reference.CgroupReader(2, str(tmp_path), fields=EVICTION, keep=SUMMARY)


def _cgroup2_root() -> str | None:
    """A writable cgroup v2 mount (the unified one on a hybrid host)."""
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            sep = parts.index("-")
            if parts[sep + 1] == "cgroup2" and os.access(parts[4], os.W_OK):
                return parts[4]
    return None


def test_real_cgroup_removed_and_recreated_is_never_read_through_a_stale_descriptor() -> None:
    root = _cgroup2_root()
    if root is None:
        pytest.skip("no writable cgroup v2 mount (needs root and cgroup2)")
    name = f"kubelet-py-test-{os.getpid()}"
    d = Path(root) / name
    d.mkdir()
    try:
        # Burn some CPU in the cgroup so its cpu.stat differs from a fresh one's.
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys,time\nsys.stdin.readline()\n"
             "t=time.process_time()\nwhile time.process_time()-t<0.05: pass\n"],
            stdin=subprocess.PIPE,
        )  # fmt: skip
        (d / "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.close()
        child.wait(30)
        fields = frozenset({"cpu_usage_ns", "cpu_pressure"})
        r = native.CgroupReader(2, root, fields=fields, max_fds=100)
        first = r.read([name])[0]
        assert name in r.kept and r.open_fds == 2
        assert first.cpu_usage_ns is not None and first.cpu_usage_ns > 0
        assert first == reference.parse_cgroups([name], 2, root, fields=fields)[0]
        d.rmdir()
        gone = r.read([name])[0]
        assert gone.cpu_usage_ns is None and gone.cpu_pressure is None
        d.mkdir()
        deadline = time.monotonic() + 5
        again = r.read([name])[0]
        while again != reference.parse_cgroups([name], 2, root, fields=fields)[0]:
            assert time.monotonic() < deadline  # pressure averages may tick in between
            again = r.read([name])[0]
        assert again.cpu_usage_ns == 0  # the new cgroup's, not the old one's
        # Removed and re-created between two reads, with descriptors open: the
        # kept ones answer ENODEV, the reader reads the new cgroup by path.
        assert r.open_fds == 2
        d.rmdir()
        d.mkdir()
        assert r.read([name])[0].cpu_usage_ns == 0
        r.close()
    finally:
        if d.exists():
            d.rmdir()
