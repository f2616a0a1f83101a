"""Hypothesis strategies for cgroup v1/v2 files and trees as the kernel writes
them, and as it must not be trusted to: valid values, huge numbers, garbage,
truncated files, missing files, extra keys."""

from __future__ import annotations

from hypothesis import strategies as st

MAX = 2**63 - 1
numbers = st.one_of(
    st.integers(0, 10**6),
    st.integers(0, MAX),
    st.integers(MAX - 5, 10**19 + 5),  # around and past the limit
    st.sampled_from([0, 1, 2**62, 2**62 - 1, 9223372036854771712]),
)
garbage = st.sampled_from(
    [b"", b"-1", b"+5", b"1.5", b"12a", b" 7", b"7 ", b"max", b"\xff\xfe", b"0x10", b"1e3",
     b"00000000000000000007", b"\n", b"\t3"]
)  # fmt: skip
value = st.one_of(numbers.map(lambda n: str(n).encode()), garbage)


def kv_file(keys: list[str]) -> st.SearchStrategy[bytes]:
    line = st.tuples(st.sampled_from([*keys, "other", "x"]), value).map(
        lambda kv: kv[0].encode() + b" " + kv[1]
    )
    junk = st.sampled_from([b"", b"nospace", b" leading", b"key  2", b"key\t3"])
    return st.lists(st.one_of(line, line, junk), max_size=12).map(lambda ls: b"\n".join(ls))


def psi_file() -> st.SearchStrategy[bytes]:
    good = st.tuples(st.integers(0, 10**9 + 1), st.integers(0, 99)).map(
        lambda t: f"{t[0]}.{t[1]:02d}".encode()
    )
    avg = st.one_of(good, good, good, st.sampled_from([b"1.5", b"1.234", b".50", b"1.", b"abc"]))
    kind = st.sampled_from([b"some", b"full", b"some", b"full", b"half"])
    line = st.tuples(
        kind, avg, avg, avg, st.one_of(numbers.map(lambda n: str(n).encode()), value)
    ).map(lambda t: b"%s avg10=%s avg60=%s avg300=%s total=%s" % t)
    return st.lists(line, max_size=3).map(lambda ls: b"\n".join(ls))


def io_stat_file() -> st.SearchStrategy[bytes]:
    item = st.tuples(st.sampled_from([b"rbytes", b"wbytes", b"rios", b"wios", b"dbytes"]), value)
    line = st.tuples(
        st.sampled_from([b"8:0", b"259:1", b""]),
        st.lists(item.map(lambda kv: kv[0] + b"=" + kv[1]), max_size=5),
        st.sampled_from([b" ", b"  "]),
    ).map(lambda t: t[0] + t[2] + t[2].join(t[1]) if t[1] else t[0])
    return st.lists(line, max_size=4).map(lambda ls: b"\n".join(ls))


def blkio_file() -> st.SearchStrategy[bytes]:
    line = st.tuples(
        st.sampled_from([b"8:0", b"Total"]),
        st.sampled_from([b"Read", b"Write", b"Sync", b"Async"]),
        value,
    ).map(lambda t: b"%s %s %s" % t)
    total = value.map(lambda v: b"Total " + v)
    return st.lists(st.one_of(line, total), max_size=6).map(lambda ls: b"\n".join(ls))


def single_file(allow_max: bool) -> st.SearchStrategy[bytes]:
    base = value if not allow_max else st.one_of(value, st.just(b"max"))
    return st.tuples(base, st.sampled_from([b"", b"\n", b"\n\n"])).map(lambda t: t[0] + t[1])


def maybe(s: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes | None]:
    # None: the file is missing. Some files are cut short (truncated mid-write).
    cut = st.tuples(s, st.integers(0, 40)).map(lambda t: t[0][: t[1]])
    return st.one_of(st.none(), s, s, cut)


V2_FILES = {
    "cpu.stat": kv_file(["usage_usec", "user_usec", "system_usec", "nr_periods",
                         "nr_throttled", "throttled_usec"]),
    "memory.stat": kv_file(["anon", "file", "inactive_file", "pgfault", "pgmajfault"]),
    "memory.current": single_file(False),
    "memory.max": single_file(True),
    "memory.events": kv_file(["oom_kill", "oom", "max"]),
    "io.stat": io_stat_file(),
    "pids.current": single_file(False),
    "pids.max": single_file(True),
    "cpu.pressure": psi_file(),
    "memory.pressure": psi_file(),
    "io.pressure": psi_file(),
    "memory.swap.current": single_file(False),
    "memory.swap.max": single_file(True),
}  # fmt: skip
V1_FILES = {
    ("cpuacct", "cpuacct.usage"): single_file(False),
    ("cpuacct", "cpuacct.stat"): kv_file(["user", "system"]),
    ("cpu", "cpu.stat"): kv_file(["nr_periods", "nr_throttled", "throttled_time"]),
    ("memory", "memory.stat"): kv_file(
        ["total_rss", "total_cache", "total_inactive_file", "total_pgfault",
         "total_pgmajfault", "rss", "cache", "inactive_file", "pgfault", "pgmajfault",
         "total_swap", "swap", "swapcached"]
    ),
    ("memory", "memory.memsw.limit_in_bytes"): single_file(False),
    ("memory", "memory.usage_in_bytes"): single_file(False),
    ("memory", "memory.limit_in_bytes"): single_file(False),
    ("memory", "memory.oom_control"): kv_file(["oom_kill", "under_oom"]),
    ("blkio", "blkio.throttle.io_service_bytes"): blkio_file(),
    ("blkio", "blkio.throttle.io_serviced"): blkio_file(),
    ("pids", "pids.current"): single_file(False),
    ("pids", "pids.max"): single_file(True),
    # A hybrid host: the same cgroup in the unified tree, with its pressure.
    ("unified", "cpu.pressure"): psi_file(),
    ("unified", "memory.pressure"): psi_file(),
    ("unified", "io.pressure"): psi_file(),
}  # fmt: skip

v2_tree = st.fixed_dictionaries({k: maybe(v) for k, v in V2_FILES.items()})
v1_tree = st.fixed_dictionaries({k: maybe(v) for k, v in V1_FILES.items()})
