"""Hugepages limits as upstream v1.34: every page size the node has gets a
hugetlb limit on every pod cgroup (the pod's hugepages requests, pod-level
where set, else 0) and in every container's CRI resources (its own limit,
else the pod-level one, else 0); the QoS cgroups never bind. Checked on
fixture cgroup trees (this machine has no hugetlb hierarchy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubelet.cm import hugepages
from kubelet.cm.cgroup_manager import CgroupManager, PodContainerManager, cgroup_files
from kubelet.kuberuntime.kuberuntime_container_linux import NodeSettings, container_resources
from kubelet.types import Pod

MI, GI = 1 << 20, 1 << 30
SIZES = ("1GB", "2MB")


def pod(containers: list[dict[str, Any]], **spec: Any) -> Pod:
    return {  # type: ignore[return-value]
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"containers": containers, **spec},
    }


def ctr(name: str, **limits: str) -> dict[str, Any]:
    lim = {"cpu": "100m", "memory": "64Mi", **limits}
    return {"name": name, "image": "i", "resources": {"requests": dict(lim), "limits": lim}}


def test_unit_sizes_and_the_kernels_page_sizes(tmp_path: Path) -> None:
    assert hugepages.unit_size(2 * MI) == "2MB"
    assert hugepages.unit_size(GI) == "1GB"
    assert hugepages.unit_size(64 * 1024) == "64KB"
    with pytest.raises(ValueError):
        hugepages.unit_size(1000)
    for d in ("hugepages-2048kB", "hugepages-1048576kB", "not-a-size"):
        (tmp_path / d).mkdir()
    assert hugepages.page_sizes(str(tmp_path)) == ("1GB", "2MB")
    assert hugepages.page_sizes(str(tmp_path / "missing")) == ()


def test_the_pod_cgroup_limits_are_the_containers_total_or_the_pod_level_ones() -> None:
    p = pod([ctr("a", **{"hugepages-2Mi": "4Mi"}), ctr("b", **{"hugepages-2Mi": "6Mi"})])
    assert hugepages.pod_limits(p, SIZES) == {"hugetlb.1GB": 0, "hugetlb.2MB": 10 * MI}
    # Pod-level resources replace the containers' total for what they name.
    lvl = {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "16Mi", "hugepages-1Gi": "2Gi"}
    p = pod([ctr("a", **{"hugepages-2Mi": "4Mi"})], resources={"requests": lvl, "limits": lvl})
    assert hugepages.pod_limits(p, SIZES) == {"hugetlb.1GB": 2 * GI, "hugetlb.2MB": 16 * MI}
    # None asked: 0 for every size the node has.
    assert hugepages.pod_limits(pod([ctr("a")]), SIZES) == {"hugetlb.1GB": 0, "hugetlb.2MB": 0}
    assert hugepages.pod_limits(pod([ctr("a")]), ()) == {}


def test_a_container_gets_its_own_limit_else_the_pod_level_one() -> None:
    lvl = {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "16Mi"}
    own = ctr("own", **{"hugepages-2Mi": "4Mi"})
    bare = ctr("bare")
    p = pod([own, bare], resources={"requests": lvl, "limits": lvl})
    assert hugepages.container_limits(p, own, SIZES) == {"1GB": 0, "2MB": 4 * MI}  # type: ignore[arg-type]
    assert hugepages.container_limits(p, bare, SIZES) == {"1GB": 0, "2MB": 16 * MI}  # type: ignore[arg-type]
    # Without pod-level resources a bare container may use none.
    q = pod([bare])
    assert hugepages.container_limits(q, bare, SIZES) == {"1GB": 0, "2MB": 0}  # type: ignore[arg-type]
    # A size the node does not have is not sent.
    odd = ctr("odd", **{"hugepages-32Mi": "32Mi"})
    assert hugepages.container_limits(pod([odd]), odd, SIZES) == {"1GB": 0, "2MB": 0}  # type: ignore[arg-type]


def test_the_cri_resources_carry_a_limit_per_page_size() -> None:
    c = ctr("a", **{"hugepages-2Mi": "4Mi"})
    p = pod([c])
    res = container_resources(p, c, NodeSettings(hugepage_sizes=SIZES))  # type: ignore[arg-type]
    assert [(h.page_size, h.limit) for h in res.hugepage_limits] == [("1GB", 0), ("2MB", 4 * MI)]
    # A node without hugepages sends none.
    assert not container_resources(p, c, NodeSettings()).hugepage_limits  # type: ignore[arg-type]


def test_hugetlb_files_on_v1_and_v2() -> None:
    r = {"hugetlb.2MB": 4 * MI, "cpu_shares": 2}
    assert cgroup_files(1, "hugetlb", r) == [("hugetlb.2MB.limit_in_bytes", str(4 * MI))]
    assert ("hugetlb.2MB.max", str(4 * MI)) in cgroup_files(2, "", r)
    assert cgroup_files(1, "memory", {"hugetlb.2MB": 1}) == []


def v1_tree(tmp: Path, hugetlb: bool) -> str:
    ctrls = ["cpu", "memory", "pids", *(["hugetlb"] if hugetlb else [])]
    lines = []
    for i, ctrl in enumerate(ctrls):
        (tmp / ctrl).mkdir()
        lines.append(f"{30 + i} 25 0:{30 + i} / {tmp / ctrl} rw - cgroup cgroup rw,{ctrl}")
    (tmp / "mountinfo").write_text("\n".join(lines) + "\n")
    return str(tmp / "mountinfo")


def kernel_files(d: Path, sizes: tuple[str, ...], suffix: str) -> None:
    """What the kernel puts in a new hugetlb cgroup directory."""
    d.mkdir(parents=True, exist_ok=True)
    for s in sizes:
        (d / f"hugetlb.{s}.{suffix}").write_text("9223372036854771712\n")


def test_pod_and_qos_cgroups_get_their_hugetlb_limits_on_v1(tmp_path: Path) -> None:
    pcm = PodContainerManager(CgroupManager(mountinfo=v1_tree(tmp_path, True)),
                              hugepage_sizes=SIZES)  # fmt: skip
    assert not pcm.hugetlb_unavailable()
    hroot = tmp_path / "hugetlb" / "kubepods"
    for d in (hroot / "burstable", hroot / "besteffort", hroot / "podu1"):
        kernel_files(d, SIZES, "limit_in_bytes")
    pcm.setup_qos()
    for qos in ("burstable", "besteffort"):
        got = (hroot / qos / "hugetlb.2MB.limit_in_bytes").read_text()
        assert got == str(hugepages.UNBOUNDED)
    lvl = {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "16Mi"}
    pcm.ensure(pod([ctr("a")], resources={"requests": lvl, "limits": lvl}))
    assert (hroot / "podu1" / "hugetlb.2MB.limit_in_bytes").read_text() == str(16 * MI)
    assert (hroot / "podu1" / "hugetlb.1GB.limit_in_bytes").read_text() == "0"


def test_without_a_hugetlb_hierarchy_nothing_is_written_and_it_is_said(tmp_path: Path) -> None:
    pcm = PodContainerManager(CgroupManager(mountinfo=v1_tree(tmp_path, False)),
                              hugepage_sizes=SIZES)  # fmt: skip
    assert pcm.hugetlb_unavailable()
    pcm.ensure(pod([ctr("a", **{"hugepages-2Mi": "4Mi"})]))  # no error
    assert not list(tmp_path.rglob("hugetlb.*"))
    # A node without hugepages has nothing to say.
    (tmp_path / "x").mkdir()
    bare = PodContainerManager(CgroupManager(mountinfo=v1_tree(tmp_path / "x", False)))
    assert not bare.hugetlb_unavailable()


def test_v2_writes_max_files_where_the_controller_is_enabled(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text(f"30 25 0:30 / {tmp_path} rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids hugetlb\n")
    pcm = PodContainerManager(CgroupManager(mountinfo=str(tmp_path / "mountinfo")),
                              hugepage_sizes=("2MB",))  # fmt: skip
    assert not pcm.hugetlb_unavailable()
    kernel_files(tmp_path / "kubepods" / "besteffort" / "podu1", ("2MB",), "max")
    pcm.ensure(pod([{"name": "a", "image": "i"}]))
    got = (tmp_path / "kubepods" / "besteffort" / "podu1" / "hugetlb.2MB.max").read_text()
    assert got == "0"
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    assert pcm.hugetlb_unavailable()
