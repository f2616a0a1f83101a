"""Reading container logs in the CRI format for /containerLogs (kuberuntime/logs upstream).

A CRI log line is ``<RFC3339Nano time> <stdout|stderr> <tags> <content>\\n``; the
tag ``P`` marks a partial record (the runtime split a long line) and ``F`` the
record that ends a line. Behaviour follows the Go kubelet: tailLines counts the
file's lines from its end, sinceSeconds/sinceTime drop older records,
limitBytes cuts the output, timestamps prefix each line with its time in
RFC3339 with nine fractional digits, and follow keeps reading until the
container stops running (reopening the file when it is rotated).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
FOLLOW_POLL_S = 0.1


@dataclass
class LogOptions:
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_ns: int | None = None  # records older than this are skipped
    timestamps: bool = False
    follow: bool = False
    previous: bool = False


class LogOptionsError(ValueError):
    """A query the API would refuse (PodLogOptions validation): HTTP 422."""


def _int(query: Mapping[str, str], key: str, minimum: int) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        v = int(raw)
    except ValueError:
        raise LogOptionsError(f"{key}: {raw!r} is not an integer") from None
    if v < minimum:
        raise LogOptionsError(f"{key}: must be greater than or equal to {minimum}")
    return v


def _bool(query: Mapping[str, str], key: str) -> bool:
    # As the API's query conversion: present means true unless "false" or "0".
    raw = query.get(key)
    return raw is not None and raw.lower() not in ("false", "0")


def parse_options(query: Mapping[str, str], now: float | None = None) -> LogOptions:
    """PodLogOptions from the query of a /containerLogs request (v1 names; the
    legacy ``tail`` is tailLines, ``tail=all`` no limit)."""
    q = dict(query)
    if "tail" in q:
        tail = q.pop("tail")
        if tail != "all":
            q["tailLines"] = tail
    since_s = _int(q, "sinceSeconds", 1)
    since_time = q.get("sinceTime")
    if since_s is not None and since_time:
        raise LogOptionsError("at most one of sinceTime or sinceSeconds may be specified")
    since_ns = None
    if since_s is not None:
        since_ns = int(((time.time() if now is None else now) - since_s) * 1e9)
    elif since_time:
        parsed = parse_timestamp(since_time.encode())
        if parsed is None:
            raise LogOptionsError(f"sinceTime: {since_time!r} is not an RFC3339 time")
        since_ns = parsed[0]
    return LogOptions(
        tail_lines=_int(q, "tailLines", 0),
        limit_bytes=_int(q, "limitBytes", 1),
        since_ns=since_ns,
        timestamps=_bool(q, "timestamps"),
        follow=_bool(q, "follow"),
        previous=_bool(q, "previous"),
    )


def parse_timestamp(raw: bytes) -> tuple[int, bytes] | None:
    """(nanoseconds since the epoch, the time in RFC3339 with 9 fractional digits)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    head, dot, rest = text.partition(".")
    frac = ""
    zone = rest
    if dot:
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, zone = rest[:i], rest[i:]
        if not frac or len(frac) > 9:
            return None
    else:
        # No fraction: the zone starts after the seconds (…T15:04:05Z / +07:00).
        for i in range(len(head) - 1, 9, -1):
            if head[i] in "Z+-":
                head, zone = head[:i], head[i:]
                break
    if len(head) != 19 or head[10] not in "Tt" or not zone:
        return None
    try:
        dt = datetime.datetime.fromisoformat(head + ("+00:00" if zone in ("Z", "z") else zone))
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    nanos = frac.ljust(9, "0")
    ns = int(dt.timestamp()) * 1_000_000_000 + int(nanos)
    return ns, f"{head}.{nanos}{zone}".encode()


@dataclass
class Record:
    ns: int
    timestamp: bytes  # RFC3339, 9 fractional digits
    stream: bytes
    partial: bool
    content: bytes


def parse_line(line: bytes) -> Record | None:
    """One CRI log line (without its newline), or None when it is not one."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    ts = parse_timestamp(parts[0])
    if ts is None or parts[1] not in (b"stdout", b"stderr"):
        return None
    tags = parts[2].split(b":")
    content = parts[3] if len(parts) == 4 else b""
    return Record(ts[0], ts[1], parts[1], b"P" in tags, content)


def tail_offset(f: BinaryIO, lines: int, block: int = READ_CHUNK) -> int:
    """The offset of the start of the last `lines` lines of an open binary file."""
    end = f.seek(0, os.SEEK_END)
    if lines == 0:
        return end
    pos = end
    seen = 0
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step)
        i = len(data)
        while True:
            i = data.rfind(b"\n", 0, i)
            if i < 0:
                break
            if pos + i == end - 1:
                continue  # the file's final newline ends the last line
            seen += 1
            if seen == lines:
                return pos + i + 1
    return 0


class _Writer:
    """Applies since, timestamps and limitBytes to records, in order."""

    def __init__(self, opts: LogOptions, write: Callable[[bytes], Awaitable[None]]) -> None:
        self.opts = opts
        self.write = write
        self.remaining = opts.limit_bytes
        # Per stream: is the next record the start of a line (partials continue one)?
        self.line_start = {b"stdout": True, b"stderr": True}

    async def line(self, raw: bytes) -> bool:
        """Write one file line; False once limitBytes is used up."""
        rec = parse_line(raw)
        if rec is None:
            log.debug("skipping a log line that is not in the CRI format: %r", raw[:80])
            return True
        if self.opts.since_ns is not None and rec.ns < self.opts.since_ns:
            return True
        out = rec.content if rec.partial else rec.content + b"\n"
        if self.opts.timestamps and self.line_start[rec.stream]:
            out = rec.timestamp + b" " + out
        self.line_start[rec.stream] = not rec.partial
        if self.remaining is not None:
            out = out[: self.remaining]
            self.remaining -= len(out)
        if out:
            await self.write(out)
        return self.remaining != 0


async def read_logs(
    path: str,
    opts: LogOptions,
    write: Callable[[bytes], Awaitable[None]],
    running: Callable[[], Awaitable[bool]],
) -> None:
    """Write the container's log from `path` to `write`. With follow, keep going
    while `running()` says the container runs, then drain what is left."""
    loop = asyncio.get_running_loop()
    f = await loop.run_in_executor(None, open, path, "rb")
    try:
        if opts.tail_lines is not None:
            f.seek(await loop.run_in_executor(None, tail_offset, f, opts.tail_lines))
        w = _Writer(opts, write)
        pending = b""
        stopping = False
        while True:
            chunk = await loop.run_in_executor(None, f.read, READ_CHUNK)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    if not await w.line(raw):
                        return
                continue
            if not opts.follow or stopping:
                # A last line without its newline is still being written: skip it.
                return
            if not await running():
                stopping = True  # one more read picks up the last lines
                continue
            try:
                rotated = os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                rotated = False  # between rename and create: look again
            if rotated:
                f.close()
                f = await loop.run_in_executor(None, open, path, "rb")
                pending = b""
                continue
            await asyncio.sleep(FOLLOW_POLL_S)
    finally:
        f.close()


class LogTargetError(Exception):
    """No log to read for this request (HTTP 400, as upstream), or no such pod or
    container (HTTP 404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# Waiting reasons that mean the container never got as far as writing a log.
_IMAGE_PROBLEMS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName")


def log_container_id(status: Mapping[str, object] | None, pod: str, container: str,
                     previous: bool) -> str:  # fmt: skip
    """The runtime ID (without its scheme) of the container instance whose log a
    request means, from the pod's API status (validateContainerLogStatus upstream)."""
    entries: list[dict[str, object]] = []
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        entries.extend((status or {}).get(key) or [])  # type: ignore[arg-type]
    cs = next((e for e in entries if e.get("name") == container), None)
    if cs is None:
        raise LogTargetError(f'container "{container}" in pod "{pod}" is not available')
    state: dict[str, dict[str, str]] = cs.get("state") or {}  # type: ignore[assignment]
    last: dict[str, dict[str, str]] = cs.get("lastState") or {}  # type: ignore[assignment]
    last_id = (last.get("terminated") or {}).get("containerID", "")
    if previous:
        if not last_id:
            raise LogTargetError(f'previous terminated container "{container}" in pod "{pod}" '
                                 "not found")  # fmt: skip
        cid = last_id
    elif "terminated" in state:
        cid = state["terminated"].get("containerID", "")
        if not cid:
            raise LogTargetError(f'container "{container}" in pod "{pod}" is terminated')
    elif "running" in state:
        cid = str(cs.get("containerID") or "")
    elif last_id:
        cid = last_id  # waiting to restart: the last run's log
    else:
        reason = (state.get("waiting") or {}).get("reason", "")
        if reason in _IMAGE_PROBLEMS:
            reason = "trying and failing to pull image"
        what = f": {reason}" if reason else " - no logs yet"
        raise LogTargetError(f'container "{container}" in pod "{pod}" is waiting to start{what}')
    if not cid:
        raise LogTargetError(f'container "{container}" in pod "{pod}" has no container ID yet')
    return cid.split("://", 1)[-1]
