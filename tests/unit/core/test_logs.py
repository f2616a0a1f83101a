"""Container logs in the CRI format: parsing, options, selection of the instance,
and streaming with tail, since, limit, timestamps and follow."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from kubelet.kuberuntime.logs import (
    LogOptions,
    LogOptionsError,
    LogTargetError,
    log_container_id,
    parse_line,
    parse_options,
    parse_timestamp,
    read_logs,
    tail_offset,
)

T0 = "2026-11-23T10:00:00.5Z"  # 1795428000.5


def line(ts: str, text: str, stream: str = "stdout", tag: str = "F") -> bytes:
    return f"{ts} {stream} {tag} {text}\n".encode()


def test_timestamps_parse_to_nanoseconds_and_print_with_nine_digits() -> None:
    ns, out = parse_timestamp(b"2016-10-06T00:17:09.669794202Z")  # type: ignore[misc]
    assert ns == 1475713029_669794202 and out == b"2016-10-06T00:17:09.669794202Z"
    ns, out = parse_timestamp(b"2016-10-06T02:17:09.5+02:00")  # type: ignore[misc]
    assert ns == 1475713029_500000000 and out == b"2016-10-06T02:17:09.500000000+02:00"
    ns, out = parse_timestamp(b"2016-10-06T00:17:09Z")  # type: ignore[misc]
    assert ns == 1475713029_000000000 and out == b"2016-10-06T00:17:09.000000000Z"
    for bad in (
        b"2016-10-06 00:17:09Z",
        b"2016-10-06T00:17:09",
        b"yesterday",
        b"2016-10-06T00:17:09.Z",
    ):
        assert parse_timestamp(bad) is None, bad


def test_cri_lines() -> None:
    r = parse_line(b"2016-10-06T00:17:09.669794202Z stderr P part one")
    assert r is not None and r.stream == b"stderr" and r.partial and r.content == b"part one"
    r = parse_line(b"2016-10-06T00:17:09.669794202Z stdout F ")
    assert r is not None and not r.partial and r.content == b""
    assert parse_line(b"2016-10-06T00:17:09.669794202Z stdin F x") is None
    assert parse_line(b"not a log line") is None


def test_options_follow_the_api_rules() -> None:
    o = parse_options({"tail": "3", "timestamps": "true", "follow": "1"})
    assert o.tail_lines == 3 and o.timestamps and o.follow and not o.previous
    assert parse_options({"tail": "all"}).tail_lines is None
    assert parse_options({"tailLines": "0", "previous": "false"}).tail_lines == 0
    assert parse_options({"sinceSeconds": "10"}, now=100.0).since_ns == 90 * 10**9
    assert parse_options({"sinceTime": "2016-10-06T00:17:09Z"}).since_ns == 1475713029 * 10**9
    for bad in (
        {"sinceSeconds": "5", "sinceTime": "2016-10-06T00:17:09Z"},
        {"limitBytes": "0"},
        {"tailLines": "-1"},
        {"sinceSeconds": "soon"},
        {"sinceTime": "2016-10-06"},
    ):
        with pytest.raises(LogOptionsError):
            parse_options(bad)


def test_tail_offset_counts_lines_from_the_end() -> None:
    data = b"a\nbb\nccc\n"
    f = io.BytesIO(data)
    assert data[tail_offset(f, 1) :] == b"ccc\n"
    assert data[tail_offset(f, 2, block=3) :] == b"bb\nccc\n"
    assert data[tail_offset(f, 10, block=2) :] == data
    assert tail_offset(f, 0) == len(data)
    unterminated = io.BytesIO(b"a\nb")
    assert tail_offset(unterminated, 1) == 2


async def collect(path: Path, opts: LogOptions, running: bool = False) -> bytes:
    out: list[bytes] = []

    async def write(b: bytes) -> None:
        out.append(b)

    async def is_running() -> bool:
        return running

    await read_logs(str(path), opts, write, is_running)
    return b"".join(out)


async def test_partials_join_and_timestamps_start_each_line(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(
        line(T0, "hello ", tag="P")
        + line(T0, "oops", stream="stderr")
        + line(T0, "world")
        + b"garbage that is not a CRI line\n"
        + line(T0, "last")
    )
    assert await collect(p, LogOptions()) == b"hello oops\nworld\nlast\n"
    ts = b"2026-11-23T10:00:00.500000000Z "
    got = await collect(p, LogOptions(timestamps=True))
    assert got == ts + b"hello " + ts + b"oops\nworld\n" + ts + b"last\n"


async def test_tail_since_and_limit(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(b"".join(line(f"2026-11-23T10:00:0{i}Z", f"l{i}") for i in range(6)))
    assert await collect(p, LogOptions(tail_lines=2)) == b"l4\nl5\n"
    since = parse_timestamp(b"2026-11-23T10:00:03Z")[0]  # type: ignore[index]
    assert await collect(p, LogOptions(since_ns=since)) == b"l3\nl4\nl5\n"
    assert await collect(p, LogOptions(limit_bytes=5)) == b"l0\nl1"
    # A half-written last line is not shown until it is complete.
    with p.open("ab") as fh:
        fh.write(b"2026-11-23T10:00:09Z stdout F unfini")
    assert (await collect(p, LogOptions())).endswith(b"l4\nl5\n")


async def test_follow_reads_new_lines_until_the_container_stops(tmp_path: Path) -> None:
    p = tmp_path / "0.log"
    p.write_bytes(line(T0, "first"))
    out: list[bytes] = []
    state = {"running": True}

    async def write(b: bytes) -> None:
        out.append(b)

    async def running() -> bool:
        return state["running"]

    task = asyncio.create_task(read_logs(str(p), LogOptions(follow=True), write, running))
    await asyncio.sleep(0.3)
    assert out == [b"first\n"] and not task.done()
    with p.open("ab") as fh:
        fh.write(line(T0, "second"))
    await asyncio.sleep(0.3)
    assert out == [b"first\n", b"second\n"]
    # Rotation: the runtime renames the file and starts a new one.
    os.rename(p, tmp_path / "0.log.1")
    p.write_bytes(line(T0, "after rotation"))
    await asyncio.sleep(0.3)
    assert out[-1] == b"after rotation\n"
    # The container stops; what it wrote last still comes out, then the stream ends.
    with p.open("ab") as fh:
        fh.write(line(T0, "bye"))
    state["running"] = False
    await asyncio.wait_for(task, 2)
    assert out[-1] == b"bye\n"


def status(**cs: object) -> dict[str, object]:
    return {"containerStatuses": [{"name": "c", **cs}]}


def test_which_instance_a_request_means() -> None:
    running = status(containerID="cri://new", state={"running": {}},
                     lastState={"terminated": {"containerID": "cri://old"}})  # fmt: skip
    assert log_container_id(running, "p", "c", previous=False) == "new"
    assert log_container_id(running, "p", "c", previous=True) == "old"
    crashloop = status(containerID="cri://old", state={"waiting": {"reason": "CrashLoopBackOff"}},
                       lastState={"terminated": {"containerID": "cri://old"}})  # fmt: skip
    assert log_container_id(crashloop, "p", "c", previous=False) == "old"
    done = status(state={"terminated": {"containerID": "cri://x"}})
    assert log_container_id(done, "p", "c", previous=False) == "x"
    with pytest.raises(LogTargetError, match='previous terminated container "c" in pod "p"'):
        log_container_id(done, "p", "c", previous=True)
    creating = status(state={"waiting": {"reason": "ContainerCreating"}})
    with pytest.raises(LogTargetError, match="is waiting to start: ContainerCreating"):
        log_container_id(creating, "p", "c", previous=False)
    pulling = status(state={"waiting": {"reason": "ImagePullBackOff"}})
    with pytest.raises(LogTargetError, match="trying and failing to pull image"):
        log_container_id(pulling, "p", "c", previous=False)
    with pytest.raises(LogTargetError, match="is not available") as err:
        log_container_id(None, "p", "c", previous=False)
    assert err.value.status == 400
