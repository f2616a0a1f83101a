"""The user namespace manager: allocation over the kubelet's range, the
per-pod `userns` file (upstream's JSON), recovery after a restart, refusal
of files that overlap or do not fit, release, and upstream's errors."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, cast

import pytest

from kubelet.cri.api import api_pb2 as pb
from kubelet.types import Pod
from kubelet.userns.idrange import IDRange
from kubelet.userns.userns_manager import Bitmap, UsernsError, UsernsManager

UNIT = 65536


class Handlers:
    """What the runtime's Status said: handler name -> user namespaces."""

    def __init__(self, **named: bool) -> None:
        self.named = named or {"": True}

    def handler_supports_user_namespaces(self, handler: str) -> bool:
        if not self.named:
            return False
        if handler not in self.named:
            raise LookupError(handler)
        return self.named[handler]


def pod(u: str = "u1", host_users: bool | None = False) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if host_users is not None:
        spec["hostUsers"] = host_users
    return cast(Pod, {"metadata": {"name": "p", "namespace": "ns", "uid": u}, "spec": spec})


def mgr(
    root: Path, slots: int = 8, first: int = UNIT, handlers: Handlers | None = None, **kw: Any
) -> UsernsManager:
    rng = IDRange(first, slots * UNIT, UNIT)
    return UsernsManager(str(root), rng, handlers or Handlers(), rand=random.Random(1), **kw)


def file_of(root: Path, u: str) -> Path:
    return root / "pods" / u / "userns"


def write_file(root: Path, u: str, content: str | bytes) -> None:
    p = file_of(root, u)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(content.encode() if isinstance(content, str) else content)


def good(host_id: int, length: int = UNIT) -> str:
    one = [{"hostId": host_id, "containerId": 0, "length": length}]
    return json.dumps({"uidMappings": one, "gidMappings": one})


# ------------------------------------------------------------- allocation
async def test_a_pod_gets_one_aligned_range_and_its_file(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    ns = await m.get_or_create(pod("u1"), "")
    assert ns is not None and ns.mode == pb.POD
    (u,), (g,) = ns.uids, ns.gids
    assert u == g and u.container_id == 0 and u.length == UNIT
    assert u.host_id % UNIT == 0 and UNIT <= u.host_id < UNIT + 8 * UNIT
    # upstream's file: same keys, same order
    doc = json.loads(file_of(tmp_path, "u1").read_bytes())
    assert doc == {
        "uidMappings": [{"hostId": u.host_id, "containerId": 0, "length": UNIT}],
        "gidMappings": [{"hostId": u.host_id, "containerId": 0, "length": UNIT}],
    }
    assert list(doc) == ["uidMappings", "gidMappings"]
    # the same pod asks again (each container does): the same range
    assert await m.get_or_create(pod("u1"), "") == ns


async def test_pods_get_distinct_ranges_until_exhaustion_with_upstreams_error(
    tmp_path: Path,
) -> None:
    m = mgr(tmp_path, slots=4)
    got = set()
    for i in range(4):
        ns = await m.get_or_create(pod(f"u{i}"), "")
        assert ns is not None
        got.add(ns.uids[0].host_id)
    assert got == {UNIT * k for k in range(1, 5)}
    with pytest.raises(UsernsError) as e:
        await m.get_or_create(pod("u5"), "")
    assert str(e.value) == (
        "create user namespace: could not find an empty slot to allocate a user namespace"
    )
    assert not file_of(tmp_path, "u5").exists()
    # a released range is free again
    m.release("u2")
    assert not file_of(tmp_path, "u2").exists()
    ns = await m.get_or_create(pod("u5"), "")
    assert ns is not None and ns.uids[0].host_id not in {m.allocated(u) for u in ("u0", "u1", "u3")}


async def test_host_user_pods_get_node_mode_and_no_range(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    for hu in (None, True):
        ns = await m.get_or_create(pod("h", hu), "")
        assert ns == pb.UserNamespace(mode=pb.NODE)
    assert m.allocated("h") is None and m.free_slots == 8
    off = mgr(tmp_path, enabled=False)
    assert await off.get_or_create(pod("h", None), "") is None
    with pytest.raises(UsernsError, match='feature gate "UserNamespacesSupport" is disabled'):
        await off.get_or_create(pod("h", True), "")


@pytest.mark.parametrize(
    ("handlers", "handler", "message"),
    [
        (
            Handlers(runc=False, **{"": False}),
            "",
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces",
        ),
        (
            Handlers(runc=False, **{"": True}),
            "runc",
            'can\'t set `spec.hostUsers: false`, RuntimeClass handler "runc" does not support '
            "user namespaces",
        ),
        (
            Handlers(runc=True),
            "kata",
            'can\'t set `spec.hostUsers: false`, RuntimeClass handler "kata" does not support '
            'user namespaces: the handler "kata" is not known',
        ),
    ],
)
async def test_a_handler_without_user_namespaces_refuses_the_pod(
    tmp_path: Path, handlers: Handlers, handler: str, message: str
) -> None:
    m = mgr(tmp_path, handlers=handlers)
    with pytest.raises(UsernsError) as e:
        await m.get_or_create(pod(), handler)
    assert str(e.value) == message
    assert m.free_slots == 8 and not file_of(tmp_path, "u1").exists()


async def test_a_runtime_that_names_no_handlers_supports_none(tmp_path: Path) -> None:
    h = Handlers()
    h.named = {}
    with pytest.raises(UsernsError, match="runtime does not support user namespaces"):
        await mgr(tmp_path, handlers=h).get_or_create(pod(), "")


async def test_a_pod_uid_that_is_not_a_path_component_is_refused(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    with pytest.raises(ValueError, match="cannot be used in a path"):
        await m.get_or_create(pod("../etc"), "")
    assert not (tmp_path / "etc").exists()


async def test_pods_created_at_once_never_share_a_range(tmp_path: Path) -> None:
    """The slot is taken before the file write awaits: eight pods at once get
    the eight slots, the ninth upstream's exhaustion error."""
    import asyncio

    m = mgr(tmp_path)
    got = await asyncio.gather(
        *(m.get_or_create(pod(f"p{i}"), "") for i in range(9)), return_exceptions=True
    )
    ids = [g.uids[0].host_id for g in got if isinstance(g, pb.UserNamespace)]
    assert sorted(ids) == [UNIT * k for k in range(1, 9)]
    (err,) = [g for g in got if isinstance(g, BaseException)]
    assert "could not find an empty slot" in str(err)


# --------------------------------------------------------------- restart
async def test_a_restarted_kubelet_recovers_every_range(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    before = {u: await m.get_or_create(pod(u), "") for u in ("a", "b", "c")}
    (tmp_path / "pods" / "hostpod").mkdir()  # a pod dir without a file: no range
    again = mgr(tmp_path)
    again.recover()
    assert again.free_slots == 5
    for u, ns in before.items():
        assert again.allocated(u) == ns.uids[0].host_id  # type: ignore[union-attr]
        assert await again.get_or_create(pod(u), "") == ns
    # new pods never get a recovered range
    for i in range(5):
        ns = await again.get_or_create(pod(f"n{i}"), "")
        assert ns is not None and ns.uids[0].host_id not in {
            b.uids[0].host_id  # type: ignore[union-attr]
            for b in before.values()
        }


def test_recovery_with_the_gate_off_reads_nothing(tmp_path: Path) -> None:
    write_file(tmp_path, "a", "not json")
    mgr(tmp_path, enabled=False).recover()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a": good(2 * UNIT), "b": good(2 * UNIT)}, "already taken"),
        ({"a": "{"}, "invalid user namespace mappings file"),
        ({"a": "[]"}, "invalid user namespace mappings file"),
        ({"a": json.dumps({"uidMappings": []})}, "no more than one mapping allowed"),
        (
            {"a": json.dumps({"uidMappings": [{"hostId": UNIT, "length": UNIT}] * 2})},
            "no more than one mapping allowed",
        ),
        (
            {"a": json.dumps({"uidMappings": [{"hostId": UNIT, "length": UNIT}]})},
            "GID and UID mappings should be identical.",
        ),
        (
            {
                "a": json.dumps(
                    {
                        "uidMappings": [{"hostId": UNIT, "length": UNIT}],
                        "gidMappings": [{"hostId": 2 * UNIT, "length": UNIT}],
                    }
                )
            },
            "GID and UID mapping should be identical",
        ),
        (
            {
                "a": json.dumps(
                    {
                        "uidMappings": [{"hostId": UNIT, "containerId": 1, "length": UNIT}],
                        "gidMappings": [{"hostId": UNIT, "containerId": 1, "length": UNIT}],
                    }
                )
            },
            "UID 0 must be mapped",
        ),
        ({"a": good(UNIT, 2 * UNIT)}, f"wrong user namespace length {2 * UNIT}"),
        ({"a": good(UNIT + 1)}, f"wrong user namespace offset specified {UNIT + 1}"),
        ({"a": good(0)}, "id 0 is out of range"),  # host root
        ({"a": good(9 * UNIT)}, f"id {9 * UNIT} is out of range"),  # past the end
        ({"a": good(-UNIT)}, "is not a uint32"),
        ({"a": good(2**32)}, "is not a uint32"),
        ({"a": good(UNIT).replace(str(UNIT), "true", 1)}, "is not a uint32"),
        ({"a": b"\xff\xfe"}, "invalid user namespace mappings file"),
        ({"a": " " * (64 * 1024 + 1)}, "is larger than"),
    ],
)
def test_recovery_refuses_files_that_do_not_fit(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    for u, content in files.items():
        write_file(tmp_path, u, content)
    with pytest.raises(UsernsError) as e:
        mgr(tmp_path).recover()
    assert message in str(e.value)
    assert str(e.value).startswith("create user namespace manager: record pod mappings: pod ")


def test_recovery_never_follows_a_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(good(UNIT))
    (tmp_path / "pods" / "a").mkdir(parents=True)
    os.symlink(elsewhere, file_of(tmp_path, "a"))
    with pytest.raises(UsernsError, match="is a symbolic link"):
        mgr(tmp_path).recover()
    # a linked pod dir is not a pod dir
    os.unlink(file_of(tmp_path, "a"))
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "userns").write_text("garbage")
    os.symlink(tmp_path / "real", tmp_path / "pods" / "b")
    m = mgr(tmp_path)
    m.recover()
    assert m.free_slots == 8


def test_a_fifo_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pods" / "a").mkdir(parents=True)
    os.mkfifo(file_of(tmp_path, "a"))
    with pytest.raises(UsernsError, match="is not a regular file"):
        mgr(tmp_path).recover()


async def test_a_file_written_after_start_is_checked_too(tmp_path: Path) -> None:
    """A pod's file that was not recovered (written meanwhile) is read and
    recorded on first use; one that collides with a live range is refused."""
    m = mgr(tmp_path)
    ns = await m.get_or_create(pod("a"), "")
    assert ns is not None
    write_file(tmp_path, "b", good(ns.uids[0].host_id))
    with pytest.raises(UsernsError) as e:
        await m.get_or_create(pod("b"), "")
    assert str(e.value) == 'user namespace: range picked for pod "b" already taken'
    # a file naming a free slot is taken as it says
    free = 8 * UNIT if m.allocated("a") != 8 * UNIT else 7 * UNIT
    write_file(tmp_path, "c", good(free))
    ns_c = await m.get_or_create(pod("c"), "")
    assert ns_c is not None and ns_c.uids[0].host_id == free == m.allocated("c")


# --------------------------------------------------------------- release
async def test_orphaned_ranges_are_freed_once_nothing_knows_the_pod(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    for u in ("a", "b", "c"):
        await m.get_or_create(pod(u), "")
    asked: list[int] = []

    def running() -> list[str]:
        asked.append(1)
        return ["b"]  # still in the runtime: keeps its range

    m.cleanup_orphans({"a", "b", "c"}, running)
    assert not asked  # every range has a known pod: the runtime is not asked
    m.cleanup_orphans({"a"}, running)
    assert asked and m.allocated("a") and m.allocated("b") and m.allocated("c") is None
    assert not file_of(tmp_path, "c").exists() and m.free_slots == 6


def test_release_of_an_unknown_pod_is_a_no_op(tmp_path: Path) -> None:
    m = mgr(tmp_path)
    m.release("nobody")
    assert m.free_slots == 8


# ---------------------------------------------------------------- bitmap
def test_bitmap_allocates_every_slot_once_in_a_random_order() -> None:
    b = Bitmap(64, random.Random(7))
    got = [b.allocate_next() for _ in range(64)]
    assert sorted(got) == list(range(64))  # type: ignore[type-var]
    assert got != list(range(64))
    assert b.allocate_next() is None and b.free == 0
    b.release(10)
    b.release(10)
    assert b.free == 1 and b.allocate_next() == 10


# ---------------------------------------------------------- static pods
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"hostNetwork": True}, "spec.hostNetwork: Forbidden: when `hostUsers` is false"),
        ({"hostPID": True}, "spec.HostPID: Forbidden: when `hostUsers` is false"),
        ({"hostIPC": True}, "spec.HostIPC: Forbidden: when `hostUsers` is false"),
        (
            {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "volumeDevices": [{"name": "d", "devicePath": "/dev/x"}],
                    }
                ]
            },
            "spec.containers[0].volumeDevices: Forbidden: when `hostUsers` is false",
        ),
    ],
)
def test_static_pods_with_host_namespaces_and_host_users_false_are_refused(
    spec: dict[str, Any], message: str
) -> None:
    """As the API server's validateHostUsers: a static pod is validated here."""
    from kubelet.config.common import ManifestError, apply_defaults

    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "hostUsers": False, **spec},
    }
    with pytest.raises(ManifestError) as e:
        apply_defaults(doc, "/m/web.yaml", "file", "n1")
    assert str(e.value) == message
    # the same with host users is fine
    doc["spec"]["hostUsers"] = True
    apply_defaults(doc, "/m/web.yaml", "file", "n1")
