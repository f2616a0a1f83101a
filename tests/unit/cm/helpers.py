"""A cgroup hierarchy (v1 or v2) in a temporary directory with its mountinfo,
and pods with the resources the cgroup managers read."""

from __future__ import annotations

from pathlib import Path


def mountinfo(tmp: Path, v1: bool) -> str:
    lines = []
    if v1:
        for i, ctrl in enumerate(("cpu", "cpuacct", "cpuset", "memory", "pids")):
            d = tmp / ctrl
            d.mkdir()
            lines.append(f"{30 + i} 25 0:{30 + i} / {d} rw,nosuid - cgroup cgroup rw,{ctrl}")
        (tmp / "cpuset" / "cpuset.cpus").write_text("0-1\n")
        (tmp / "cpuset" / "cpuset.mems").write_text("0\n")
        lines.append(f"40 25 0:40 / {tmp}/systemd rw - cgroup cgroup rw,name=systemd")
    else:
        lines.append(f"30 25 0:30 / {tmp} rw - cgroup2 cgroup2 rw,nsdelegate")
    lines.append("22 1 8:1 / / rw,relatime - ext4 /dev/vda rw")
    p = tmp / "mountinfo"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def pod(uid: str, cpu: str | None = None, mem_limit: str | None = None) -> dict:
    res: dict = {}
    if cpu:
        res["requests"] = {"cpu": cpu}
    if mem_limit:
        res["limits"] = {"memory": mem_limit}
    return {"metadata": {"uid": uid}, "spec": {"containers": [{"name": "c", "resources": res}]}}
