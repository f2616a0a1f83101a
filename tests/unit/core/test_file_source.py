"""FileSource: static pod manifests from a folder or one file into PodConfig."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.config import file as file_mod
from kubelet.config.config import Op, PodConfig, PodUpdate
from kubelet.config.file import FileSource, read_pods

NODE = "n1"
_mtimes = itertools.count(1)


def manifest(name: str, image: str = "busybox:1.36", uid: str | None = None) -> str:
    md: dict[str, Any] = {"name": name}
    if uid:
        md["uid"] = uid
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": md,
            "spec": {"containers": [{"name": "c", "image": image}]},
        }
    )


def write(path: Path, text: str) -> None:
    """Write and give the file an mtime of its own, so a quick rewrite of the same
    size is still a change to the parse cache."""
    path.write_text(text)
    ns = 1_600_000_000_000_000_000 + next(_mtimes) * 1_000_000_000
    os.utime(path, ns=(ns, ns))


def drain(cfg: PodConfig) -> list[PodUpdate]:
    out = []
    while not cfg.updates.empty():
        out.append(cfg.updates.get_nowait())
    return out


def names(update: PodUpdate) -> list[str]:
    return sorted(p["metadata"]["name"] for p in update.pods)


def summary(updates: list[PodUpdate]) -> list[tuple[Op, list[str]]]:
    return [(u.op, names(u)) for u in updates]


async def next_update(cfg: PodConfig, timeout: float = 2.0) -> PodUpdate:
    return await asyncio.wait_for(cfg.updates.get(), timeout)


@pytest.fixture
def cfg() -> PodConfig:
    return PodConfig()


# ----------------------------------------------------------- reading


async def test_a_folder_becomes_pods_in_pod_config(tmp_path: Path, cfg: PodConfig) -> None:
    write(tmp_path / "a.yaml", manifest("web"))
    write(tmp_path / "b.json", '{"kind": "Pod", "metadata": {"name": "db"},'
          ' "spec": {"containers": [{"name": "c", "image": "pg:16"}]}}')  # fmt: skip
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    [u] = drain(cfg)
    assert u.op is Op.ADD and u.source == "file" and names(u) == ["db-n1", "web-n1"]
    assert "file" in cfg.sources_seen and src.reads == 1
    for p in cfg.all_pods():
        assert p["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
        assert p["spec"]["nodeName"] == NODE
    # Reading the same folder again changes nothing.
    await src.read_once()
    assert drain(cfg) == []


async def test_an_empty_or_missing_folder_still_marks_the_source_seen(
    tmp_path: Path, cfg: PodConfig
) -> None:
    await FileSource(str(tmp_path), NODE, 60, cfg).read_once()
    assert summary(drain(cfg)) == [(Op.ADD, [])] and "file" in cfg.sources_seen
    other = PodConfig()
    await FileSource(str(tmp_path / "nope"), NODE, 60, other).read_once()
    assert summary(drain(other)) == [(Op.ADD, [])]


async def test_adding_editing_and_removing_files(tmp_path: Path, cfg: PodConfig) -> None:
    write(tmp_path / "a.yaml", manifest("a"))
    write(tmp_path / "pinned.yaml", manifest("pinned", uid="uid-pinned"))
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    drain(cfg)

    write(tmp_path / "b.yaml", manifest("b"))
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["b-n1"])]

    # An edit of a manifest that pins its UID is an update of the same pod.
    write(tmp_path / "pinned.yaml", manifest("pinned", "busybox:1.37", uid="uid-pinned"))
    await src.read_once()
    [u] = drain(cfg)
    assert u.op is Op.UPDATE and names(u) == ["pinned-n1"]
    assert u.pods[0]["metadata"]["uid"] == "uid-pinned"
    assert u.pods[0]["spec"]["containers"][0]["image"] == "busybox:1.37"

    # Without a pinned UID the content is the identity: the old pod goes, a new one comes.
    old_uid = next(p for p in cfg.all_pods() if p["metadata"]["name"] == "a-n1")["metadata"]["uid"]
    write(tmp_path / "a.yaml", manifest("a", "busybox:1.37"))
    await src.read_once()
    got = drain(cfg)
    assert summary(got) == [(Op.REMOVE, ["a-n1"]), (Op.ADD, ["a-n1"])]
    assert got[0].pods[0]["metadata"]["uid"] == old_uid != got[1].pods[0]["metadata"]["uid"]

    (tmp_path / "b.yaml").unlink()
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.REMOVE, ["b-n1"])]
    assert sorted(p["metadata"]["name"] for p in cfg.all_pods()) == ["a-n1", "pinned-n1"]


async def test_hidden_files_and_subfolders_are_ignored(tmp_path: Path, cfg: PodConfig) -> None:
    write(tmp_path / "a.yaml", manifest("a"))
    write(tmp_path / ".swp.yaml", manifest("editor-swap"))
    write(tmp_path / ".hidden", "not: [a manifest")  # broken, but never read
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "c.yaml", manifest("nested"))
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["a-n1"])]
    assert read_pods(str(tmp_path), NODE)[1] == []  # not even an error for them
    write(tmp_path / ".swp.yaml", manifest("editor-swap", "x:1"))
    await src.read_once()
    assert drain(cfg) == []


async def test_a_single_file_path(tmp_path: Path, cfg: PodConfig) -> None:
    f = tmp_path / "only.yaml"
    write(f, manifest("only", uid="u-only"))
    write(tmp_path / "sibling.yaml", manifest("sibling"))
    src = FileSource(str(f), NODE, 60, cfg)
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["only-n1"])]  # the sibling is not read
    write(f, manifest("only", "busybox:2", uid="u-only"))
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.UPDATE, ["only-n1"])]
    f.unlink()
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.REMOVE, ["only-n1"])]


# ------------------------------------------------------------ broken files


async def test_a_broken_file_is_logged_once_per_problem_and_spares_the_others(
    tmp_path: Path, cfg: PodConfig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kubelet.config.file")
    write(tmp_path / "good.yaml", manifest("good"))
    bad = tmp_path / "bad.yaml"
    write(bad, "kind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c, image: x}]}")
    src = FileSource(str(tmp_path), NODE, 60, cfg)

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if "Could not process" in r.getMessage()]

    for _ in range(3):  # periodic re-reads of the same problem
        await src.read_once()
    assert len(logged()) == 1
    assert str(bad) in logged()[0] and "metadata.name" in logged()[0]
    assert summary(drain(cfg)) == [(Op.ADD, ["good-n1"])]

    # A different problem in the same file is a new message.
    write(bad, "kind: Service\n")
    await src.read_once()
    await src.read_once()
    assert len(logged()) == 2 and 'kind must be "Pod"' in logged()[1]
    write(bad, "{ not yaml")
    await src.read_once()
    assert len(logged()) == 3 and "invalid YAML/JSON" in logged()[2]
    assert drain(cfg) == []  # the good pod never moved

    # Fixed: its pod appears; broken again later: reported again.
    write(bad, manifest("fixed"))
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["fixed-n1"])]
    write(bad, "kind: Service\n")
    await src.read_once()
    assert len(logged()) == 4
    assert summary(drain(cfg)) == [(Op.REMOVE, ["fixed-n1"])]


async def test_a_file_with_wrong_types_is_a_broken_file(
    tmp_path: Path, cfg: PodConfig, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "good.yaml", manifest("good"))
    write(tmp_path / "odd.yaml", "kind: Pod\nmetadata: {name: odd}\nspec: {containers: [{name: c, image: x}], tolerations: 5}\n")  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="kubelet.config.file"):
        await FileSource(str(tmp_path), NODE, 60, cfg).read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["good-n1"])]
    assert "odd.yaml" in caplog.text


# --------------------------------------------------------- the parse cache


async def test_an_unchanged_file_is_not_parsed_again(
    tmp_path: Path, cfg: PodConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files written by this test are "racy" (changed within the last seconds) and
    # would be parsed again anyway: pretend they are older.
    monkeypatch.setattr(file_mod, "_RACY_SECONDS", -1.0)
    parsed: list[bytes] = []
    real = file_mod.decode_manifest

    def counting(data: bytes) -> list[Any]:
        parsed.append(data)
        return real(data)

    monkeypatch.setattr(file_mod, "decode_manifest", counting)
    write(tmp_path / "a.yaml", manifest("a"))
    write(tmp_path / "b.yaml", manifest("b"))
    write(tmp_path / "bad.yaml", "kind: Nope\n")
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    assert len(parsed) == 3
    first = sorted(cfg.all_pods(), key=lambda p: p["metadata"]["name"])
    for _ in range(3):
        await src.read_once()
    assert len(parsed) == 3  # neither the good nor the broken files again
    assert sorted(cfg.all_pods(), key=lambda p: p["metadata"]["name"]) == first

    write(tmp_path / "b.yaml", manifest("b", "busybox:2"))  # only this one changed
    await src.read_once()
    assert len(parsed) == 4 and b"busybox:2" in parsed[-1]
    # The cache is per node name: another node parses for itself.
    read_pods(str(tmp_path), "n2")
    assert len(parsed) == 7


async def test_the_parse_cache_forgets_removed_files(
    tmp_path: Path, cfg: PodConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_mod, "_RACY_SECONDS", -1.0)
    write(tmp_path / "a.yaml", manifest("a"))
    write(tmp_path / "b.yaml", manifest("b"))
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    assert str(tmp_path / "b.yaml") in file_mod._parsed
    (tmp_path / "b.yaml").unlink()
    await src.read_once()
    assert str(tmp_path / "b.yaml") not in file_mod._parsed
    assert str(tmp_path / "a.yaml") in file_mod._parsed


async def test_the_parse_cache_forgets_the_files_of_an_emptied_folder(
    tmp_path: Path, cfg: PodConfig
) -> None:
    d = tmp_path / "manifests"
    d.mkdir()
    write(d / "a.yaml", manifest("a"))
    src = FileSource(str(d), NODE, 60, cfg)
    await src.read_once()
    (d / "a.yaml").unlink()
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.ADD, ["a-n1"]), (Op.REMOVE, ["a-n1"])]
    assert str(d / "a.yaml") not in file_mod._parsed


async def test_a_same_size_edit_with_the_same_mtime_is_seen(
    tmp_path: Path, cfg: PodConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_mod, "_RACY_SECONDS", -1.0)  # only ctime may tell the edit
    f = tmp_path / "a.yaml"
    write(f, manifest("a", "busybox:1.36", uid="u-a"))
    st = os.stat(f)
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    drain(cfg)
    f.write_text(manifest("a", "busybox:1.37", uid="u-a"))  # same length, same inode
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(f).st_size == st.st_size and os.stat(f).st_ino == st.st_ino
    await src.read_once()
    assert summary(drain(cfg)) == [(Op.UPDATE, ["a-n1"])]


# ------------------------------------------------------------------ run()


@pytest.fixture
async def running(tmp_path: Path, cfg: PodConfig) -> AsyncIterator[FileSource]:
    """run() with an hour-long period: anything sooner came from inotify."""
    write(tmp_path / "a.yaml", manifest("a"))
    src = FileSource(str(tmp_path), NODE, 3600, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    assert summary([await next_update(cfg)]) == [(Op.ADD, ["a-n1"])]
    yield src
    stop.set()
    await asyncio.wait_for(task, 2)  # stop does not wait for the period


async def test_inotify_wakes_the_source_on_a_new_file(
    tmp_path: Path, cfg: PodConfig, running: FileSource
) -> None:
    write(tmp_path / "b.yaml", manifest("b"))
    assert summary([await next_update(cfg)]) == [(Op.ADD, ["b-n1"])]


async def test_inotify_wakes_the_source_on_an_edit_and_a_removal(
    tmp_path: Path, cfg: PodConfig, running: FileSource
) -> None:
    write(tmp_path / "a.yaml", manifest("a", "busybox:9"))
    assert summary([await next_update(cfg), await next_update(cfg)]) == [
        (Op.REMOVE, ["a-n1"]),
        (Op.ADD, ["a-n1"]),
    ]
    (tmp_path / "a.yaml").unlink()
    assert summary([await next_update(cfg)]) == [(Op.REMOVE, ["a-n1"])]


async def test_a_burst_of_writes_is_read_in_few_passes(
    tmp_path: Path, cfg: PodConfig, running: FileSource
) -> None:
    reads = running.reads
    for i in range(20):  # an editor or a cp spread over ~60 ms
        write(tmp_path / f"p{i}.yaml", manifest(f"p{i}"))
        await asyncio.sleep(0.003)
    seen: set[str] = set()
    while len(seen) < 20:
        u = await next_update(cfg)
        assert u.op is Op.ADD
        seen.update(names(u))
    assert running.reads - reads <= 3  # settled for 0.1 s, not one read per event


async def test_inotify_on_a_single_file_watches_its_folder(tmp_path: Path) -> None:
    cfg = PodConfig()
    f = tmp_path / "only.yaml"
    write(f, manifest("only", uid="u-only"))
    src = FileSource(str(f), NODE, 3600, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    try:
        assert summary([await next_update(cfg)]) == [(Op.ADD, ["only-n1"])]
        write(f, manifest("only", "busybox:2", uid="u-only"))
        assert summary([await next_update(cfg)]) == [(Op.UPDATE, ["only-n1"])]
        # Atomic replacements (write aside, rename over) swap the inode: a watch on
        # the file itself would go deaf after the first; the folder's does not.
        for image in ("busybox:3", "busybox:4"):
            write(tmp_path / ".only.tmp", manifest("only", image, uid="u-only"))
            os.replace(tmp_path / ".only.tmp", f)
            u = await next_update(cfg)
            assert summary([u]) == [(Op.UPDATE, ["only-n1"])]
            assert u.pods[0]["spec"]["containers"][0]["image"] == image
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)


async def test_run_keeps_going_after_a_failed_read(
    tmp_path: Path, cfg: PodConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = file_mod.read_pods_by_file
    calls = 0

    def flaky(path: str, node: str, prevent_refs: bool) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise PermissionError("denied")
        return real(path, node, prevent_refs)

    monkeypatch.setattr(file_mod, "read_pods_by_file", flaky)
    write(tmp_path / "a.yaml", manifest("a"))
    src = FileSource(str(tmp_path), NODE, 0.05, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    try:
        assert summary([await next_update(cfg)]) == [(Op.ADD, ["a-n1"])]
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)
    assert calls >= 2


async def test_a_folder_created_later_is_watched_too(tmp_path: Path) -> None:
    cfg = PodConfig()
    d = tmp_path / "manifests"
    src = FileSource(str(d), NODE, 3600, cfg)
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(stop))
    try:
        assert summary([await next_update(cfg)]) == [(Op.ADD, [])]  # seen, empty
        d.mkdir()  # the parent's watch sees this one
        write(d / "a.yaml", manifest("a"))
        assert summary([await next_update(cfg)]) == [(Op.ADD, ["a-n1"])]
        write(d / "b.yaml", manifest("b"))  # but nothing watches inside the new folder
        assert summary([await next_update(cfg, timeout=1.5)]) == [(Op.ADD, ["b-n1"])]
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)


async def test_a_file_changed_within_the_racy_window_is_parsed_again(
    tmp_path: Path, cfg: PodConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writes within one tick of the filesystem's clock leave every stat field
    equal: a file changed in the last seconds is never served from the cache."""
    parsed: list[bytes] = []
    real = file_mod.decode_manifest

    def counting(data: bytes) -> list[dict[str, Any]]:
        parsed.append(data)
        return real(data)

    monkeypatch.setattr(file_mod, "decode_manifest", counting)
    f = tmp_path / "a.yaml"
    f.write_text(manifest("a"))  # ctime: now
    src = FileSource(str(tmp_path), NODE, 60, cfg)
    await src.read_once()
    await src.read_once()
    assert len(parsed) == 2
    monkeypatch.setattr(file_mod, "_RACY_SECONDS", -1.0)  # the same file, "seconds later"
    await src.read_once()
    await src.read_once()
    assert len(parsed) == 3


async def test_a_file_removed_and_written_again_at_once_is_a_removal_and_an_addition(
    tmp_path: Path, cfg: PodConfig, running: FileSource
) -> None:
    """Node e2e 'MirrorPod ... should successfully recreate when file is removed
    and recreated': the same content again (same UID) within one read still
    stops the pod and starts it again, as upstream's per-event store tells it."""
    f = tmp_path / "a.yaml"
    text = f.read_text()
    f.unlink()
    f.write_text(text)
    assert summary([await next_update(cfg), await next_update(cfg)]) == [
        (Op.REMOVE, ["a-n1"]),
        (Op.ADD, ["a-n1"]),
    ]
    # A file that never held a pod (an editor's) going away changes nothing.
    (tmp_path / "b.txt").write_text("not a manifest")
    (tmp_path / "b.txt").unlink()
    await asyncio.sleep(0.3)
    assert drain(cfg) == []
