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
import functools
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from kubelet.types import ContainerState, PodStatus

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
FOLLOW_POLL_S = 0.1  # how often a quiet log file is looked at again
FOLLOW_STATE_S = 1.0  # how often, while it stays quiet, the runtime is asked if it runs


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


_TIME = rb"(\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)"
_TIME_RE = re.compile(_TIME + rb"$")
_LINE_RE = re.compile(_TIME + rb" (stdout|stderr) ([^ ]*)(?: (.*))?$", re.S)


def parse_timestamp(raw: bytes) -> tuple[int, bytes] | None:
    """(nanoseconds since the epoch, the time in RFC3339 with 9 fractional digits)."""
    m = _TIME_RE.match(raw)
    return None if m is None else _time(m.group(1), m.group(2), m.group(3))


def _time(head: bytes, frac: bytes | None, zone: bytes) -> tuple[int, bytes] | None:
    seconds = _epoch_seconds(head, zone)
    if seconds is None:
        return None
    nanos = (frac or b"").ljust(9, b"0")
    return seconds * 1_000_000_000 + int(nanos), head + b"." + nanos + zone


@functools.lru_cache(maxsize=256)
def _epoch_seconds(head: bytes, zone: bytes) -> int | None:
    # Neighbouring log lines share their second: the calendar maths runs once for them.
    z = b"+00:00" if zone in (b"Z", b"z") else zone
    try:
        return int(datetime.datetime.fromisoformat((head + z).decode()).timestamp())
    except ValueError:
        return None


@dataclass
class Record:
    ns: int
    timestamp: bytes  # RFC3339, 9 fractional digits
    stream: bytes
    partial: bool
    content: bytes


def parse_line(line: bytes) -> Record | None:
    """One CRI log line (without its newline), or None when it is not one."""
    m = _LINE_RE.match(line)
    if m is None:
        return None
    t = _time(m.group(1), m.group(2), m.group(3))
    if t is None:
        return None
    partial = b"P" in m.group(5).split(b":")
    return Record(t[0], t[1], m.group(4), partial, m.group(6) or b"")


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


class _Filter:
    """Turns file lines into output: since, timestamps and limitBytes, in order."""

    def __init__(self, opts: LogOptions) -> None:
        self.opts = opts
        self.remaining = opts.limit_bytes
        # Per stream: is the next record the start of a line (partials continue one)?
        self.line_start = {b"stdout": True, b"stderr": True}

    def lines(self, raws: list[bytes], out: list[bytes]) -> bool:
        """Append the output of these file lines; False once limitBytes is used up."""
        since = self.opts.since_ns
        for raw in raws:
            rec = parse_line(raw)
            if rec is None:
                log.debug("skipping a log line that is not in the CRI format: %r", raw[:80])
                continue
            if since is not None and rec.ns < since:
                continue
            data = rec.content if rec.partial else rec.content + b"\n"
            if self.opts.timestamps and self.line_start[rec.stream]:
                data = rec.timestamp + b" " + data
            self.line_start[rec.stream] = not rec.partial
            if self.remaining is not None:
                data = data[: self.remaining]
                self.remaining -= len(data)
                if self.remaining == 0:
                    out.append(data)
                    return False
            out.append(data)
        return True


async def read_logs(
    path: str,
    opts: LogOptions,
    write: Callable[[bytes], Awaitable[None]],
    running: Callable[[], Awaitable[bool]],
) -> None:
    """Write the container's log from `path` to `write`, one write per chunk read.
    With follow, keep going while `running()` says the container runs, then
    drain what is left."""
    loop = asyncio.get_running_loop()
    f = await loop.run_in_executor(None, open, path, "rb")
    try:
        if opts.tail_lines is not None:
            f.seek(await loop.run_in_executor(None, tail_offset, f, opts.tail_lines))
        filt = _Filter(opts)
        pending = b""
        stopping = False
        next_state_check = 0.0
        while True:
            chunk = await loop.run_in_executor(None, f.read, READ_CHUNK)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                out: list[bytes] = []
                more = filt.lines(lines, out)
                if out:
                    await write(b"".join(out))
                if not more:
                    return
                continue
            if not opts.follow or stopping:
                # A last line without its newline is still being written: skip it.
                return
            if loop.time() >= next_state_check:
                # One CRI status call per quiet second per follower, not per poll.
                next_state_check = loop.time() + FOLLOW_STATE_S
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


def log_container_id(status: PodStatus | None, pod: str, container: str,
                     previous: bool) -> str:  # fmt: skip
    """The runtime ID (without its scheme) of the container instance whose log a
    request means, from the pod's API status (validateContainerLogStatus upstream)."""
    st: PodStatus = status or {}
    entries = [
        *(st.get("containerStatuses") or []),
        *(st.get("initContainerStatuses") or []),
        *(st.get("ephemeralContainerStatuses") or []),
    ]
    cs = next((e for e in entries if e.get("name") == container), None)
    if cs is None:
        raise LogTargetError(f'container "{container}" in pod "{pod}" is not available')
    state: ContainerState = cs.get("state") or {}
    last: ContainerState = cs.get("lastState") or {}
    last_run = last.get("terminated")
    last_id = last_run.get("containerID", "") if last_run else ""
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
