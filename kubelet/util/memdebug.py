"""Memory-leak debugging hook, off by default.

With KUBELET_MEMDEBUG=<dir> in its environment the kubelet starts tracemalloc
(KUBELET_MEMDEBUG_FRAMES deep, default 8; 0: no tracemalloc, only the counts)
and, on each SIGUSR2, writes to <dir>:

- ``mem-<n>.json``: live objects by type (gc), and the length of every sized
  container reachable from the Kubelet within a few attribute hops (Python
  dicts/sets/lists and native objects with ``__len__``, e.g. the Rust pod
  cache, which tracemalloc cannot see; the relist differ's pod_ids()), and the
  RSS, before and (with KUBELET_MEMDEBUG_TRIM=1) after glibc's malloc_trim(0),
  which tells memory the allocator keeps from memory still in use;
- ``mem-<n>.txt``: the tracemalloc diff against snapshot 0 (the first SIGUSR2),
  by traceback, biggest growth first.

Meant for the soak (benches/soak): signal once after the warm-up, again after
the drain, and compare. tracemalloc slows the process several-fold.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import linecache
import logging
import os
import signal
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

log = logging.getLogger("kubelet.memdebug")

ENV = "KUBELET_MEMDEBUG"


def container_sizes(root: object, depth: int = 3, min_len: int = 1) -> dict[str, int]:
    """len() of sized attributes reachable from `root` through object attributes,
    keyed by their attribute path (each object visited once)."""
    out: dict[str, int] = {}
    seen: set[int] = set()

    def attrs(obj: object) -> list[tuple[str, Any]]:
        d = getattr(obj, "__dict__", None)
        items = list(d.items()) if isinstance(d, dict) else []
        for slot in getattr(type(obj), "__slots__", ()) or ():
            if isinstance(slot, str) and hasattr(obj, slot):
                items.append((slot, getattr(obj, slot)))
        return items

    def walk(obj: object, path: str, left: int) -> None:
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)):
            return
        seen.add(id(obj))
        for name, val in attrs(obj):
            p = f"{path}.{name}"
            if isinstance(val, (str, bytes)):
                continue
            try:
                n = len(val) if hasattr(val, "__len__") else None
            except (TypeError, ValueError, RuntimeError):  # an object whose size is not known
                n = None
            if n is None and callable(getattr(val, "pod_ids", None)):
                try:
                    n = len(val.pod_ids())  # the native relist differ
                except (TypeError, RuntimeError):
                    n = None
            if n is not None and n >= min_len:
                out[p] = n
                if isinstance(val, dict):
                    # Maps of maps (source -> uid -> pod): the inner total as well.
                    inner = [len(v) for v in val.values() if isinstance(v, (dict, set, list))]
                    if inner:
                        out[p + "[*]"] = sum(inner)
            if left > 0 and not isinstance(val, (dict, list, set, tuple, frozenset)):
                walk(val, p, left - 1)

    walk(root, type(root).__name__, depth)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _rss_kib() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class MemDebug:
    def __init__(self, out: Path, root: object) -> None:
        self.out = out
        self.root = root
        self.n = 0
        self.first: tracemalloc.Snapshot | None = None

    def dump(self) -> None:
        gc.collect()
        types = Counter(type(o).__qualname__ for o in gc.get_objects())
        report: dict[str, Any] = {
            "rss_kib": _rss_kib(),
            "objects": dict(types.most_common(80)),
            "containers": container_sizes(self.root),
            "tasks": len(asyncio.all_tasks()),
        }
        if os.environ.get(ENV + "_TRIM") == "1":
            try:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
                report["rss_kib_after_malloc_trim"] = _rss_kib()
            except (OSError, AttributeError):
                pass
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"mem-{self.n}.json").write_text(json.dumps(report, indent=1))
        if tracemalloc.is_tracing():
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)]
            )
            if self.first is None:
                self.first = snap
            lines = [f"tracemalloc traced: {tracemalloc.get_traced_memory()}"]
            for st in snap.compare_to(self.first, "traceback")[:40]:
                lines.append(f"{st.size_diff / 1024:+.1f} KiB {st.count_diff:+d} blocks")
                lines.extend("    " + ln for ln in st.traceback.format())
            (self.out / f"mem-{self.n}.txt").write_text("\n".join(lines) + "\n")
            linecache.clearcache()  # the source lines read to format, not the kubelet's
        log.info("memdebug: wrote %s/mem-%d.*", self.out, self.n)
        self.n += 1


def install(loop: asyncio.AbstractEventLoop, root: object) -> MemDebug | None:
    """Start tracing and hook SIGUSR2 if KUBELET_MEMDEBUG is set; else nothing."""
    out = os.environ.get(ENV)
    if not out:
        return None
    frames = int(os.environ.get(ENV + "_FRAMES", "8"))
    if frames > 0:
        tracemalloc.start(frames)
    md = MemDebug(Path(out), root)
    loop.add_signal_handler(signal.SIGUSR2, md.dump)
    log.warning("%s=%s: SIGUSR2 dumps memory reports (tracemalloc: %d frames)", ENV, out, frames)
    return md
