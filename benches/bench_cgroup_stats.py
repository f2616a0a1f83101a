"""cgroup stats parsing, Cython vs reference: one parse_cgroups call over n cgroup v2
directories of a generated tree with realistic file contents (a kernel's memory.stat
has ~40 keys; io.stat two devices; PSI for cpu, memory and io)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet.stats import cgstats, reference

SIZES = [100, 1000, 10000]
IMPLS = {"native": cgstats.parse_cgroups, "reference": reference.parse_cgroups}

MEMORY_STAT_KEYS = (
    "anon file kernel kernel_stack pagetables sec_pagetables percpu sock vmalloc shmem "
    "zswap zswapped file_mapped file_dirty file_writeback swapcached anon_thp file_thp "
    "shmem_thp inactive_anon active_anon inactive_file active_file unevictable "
    "slab_reclaimable slab_unreclaimable slab workingset_refault_anon workingset_refault_file "
    "workingset_activate_anon workingset_activate_file workingset_restore_anon "
    "workingset_restore_file workingset_nodereclaim pgscan pgsteal pgfault pgmajfault "
    "pgrefill pgactivate"
).split()


def _files(i: int) -> dict[str, str]:
    psi = (
        f"some avg10=0.{i % 100:02d} avg60=0.12 avg300=0.05 total={i * 1000}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={i * 10}\n"
    )
    return {
        "cpu.stat": f"usage_usec {i * 7919}\nuser_usec {i * 5000}\nsystem_usec {i * 2919}\n"
        f"nr_periods {i}\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n",
        "memory.current": f"{(i + 1) * 4096 * 512}\n",
        "memory.max": "max\n" if i % 3 else f"{2**30}\n",
        "memory.stat": "".join(
            f"{k} {(i + 1) * (j + 1) * 4096}\n" for j, k in enumerate(MEMORY_STAT_KEYS)
        ),
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
        "io.stat": f"8:0 rbytes={i * 512} wbytes={i * 1024} rios={i} wios={i * 2} dbytes=0 dios=0\n"
        f"259:0 rbytes={i} wbytes={i} rios=1 wios=1 dbytes=0 dios=0\n",
        "pids.current": f"{i % 50 + 1}\n",
        "pids.max": "max\n",
        "cpu.pressure": psi,
        "memory.pressure": psi,
        "io.pressure": psi,
        "memory.swap.current": "0\n",
        "memory.swap.max": "max\n",
    }


@pytest.fixture(scope="module")
def trees() -> Iterator[dict[int, tuple[str, list[str]]]]:
    with tempfile.TemporaryDirectory(prefix="cgbench-") as root:
        out = {}
        for n in SIZES:
            paths = []
            for i in range(n):
                rel = f"n{n}/kubepods.slice/pod{i:05d}"
                d = Path(root) / rel
                d.mkdir(parents=True)
                for name, text in _files(i).items():
                    (d / name).write_text(text)
                paths.append(rel)
            out[n] = (root, paths)
        yield out


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("n", SIZES)
def test_cgroup_stats(benchmark, trees, impl: str, n: int) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"cgroup_stats_{n}"
    benchmark.extra_info["impl"] = impl
    root, paths = trees[n]
    fn = IMPLS[impl]
    got = benchmark(fn, paths, 2, root)
    assert len(got) == n and got[-1].memory_usage == n * 4096 * 512
