"""Static pod sources: naming, UID, annotations, merge into updates, HTTP source."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from aiohttp import web

from kubelet.config.config import Op, PodConfig
from kubelet.config.file import read_pods
from kubelet.config.http import HTTPSource
from kubelet.testing.net import serving


def manifest(name: str, image: str = "busybox:1.36", **meta: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }
    )


def test_static_pod_treatment(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(manifest("web"))
    (tmp_path / ".hidden.yaml").write_text(manifest("hidden"))
    pods, errs = read_pods(str(tmp_path), "Node-1".lower())
    assert errs == [] and len(pods) == 1
    p = pods[0]
    md = p["metadata"]
    assert md["name"] == "web-node-1" and md["namespace"] == "default"
    assert md["annotations"]["kubernetes.io/config.source"] == "file"
    assert md["annotations"]["kubernetes.io/config.hash"] == md["uid"]
    assert "kubernetes.io/config.seen" in md["annotations"]
    assert p["spec"]["nodeName"] == "node-1"
    assert p["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert {"operator": "Exists", "effect": "NoExecute"} in p["spec"]["tolerations"]
    # same content, same UID; different content or node, different UID
    again, _ = read_pods(str(tmp_path), "node-1")
    assert again[0]["metadata"]["uid"] == md["uid"]
    other_node, _ = read_pods(str(tmp_path), "node-2")
    assert other_node[0]["metadata"]["uid"] != md["uid"]
    (tmp_path / "a.yaml").write_text(manifest("web", "busybox:latest"))
    edited, _ = read_pods(str(tmp_path), "node-1")
    assert edited[0]["metadata"]["uid"] != md["uid"]
    assert edited[0]["spec"]["containers"][0]["imagePullPolicy"] == "Always"


def test_pod_config_merges_snapshots_into_updates() -> None:
    cfg = PodConfig()

    def p(uid: str, image: str = "a") -> dict:
        return {
            "metadata": {"uid": uid, "name": uid, "namespace": "default"},
            "spec": {"image": image},
        }

    cfg.set_pods("file", [p("1"), p("2")])
    cfg.set_pods("file", [p("1", "b"), p("3")])
    dup = {"metadata": {"uid": "8", "name": "7", "namespace": "default"}, "spec": {}}
    cfg.set_pods(
        "http",
        [
            {"metadata": {"uid": "9", "name": "1", "namespace": "default"}, "spec": {}},
            {"metadata": {"uid": "7", "name": "7", "namespace": "default"}, "spec": {}},
            dup,
        ],
    )
    # Watch-style changes: one pod at a time.
    cfg.upsert("api", p("20"))
    cfg.upsert("api", p("20", "c"))
    cfg.upsert("api", {**p("20", "c"), "status": {"phase": "Running"}})
    cfg.upsert(
        "api", p("20", "c") | {"metadata": {"uid": "21", "name": "20", "namespace": "default"}}
    )
    cfg.remove("api", p("20"))
    got = []
    while not cfg.updates.empty():
        u = cfg.updates.get_nowait()
        got.append((u.op, u.source, [x["metadata"]["uid"] for x in u.pods]))
    assert got == [
        (Op.ADD, "file", ["1", "2"]),
        (Op.REMOVE, "file", ["2"]),
        (Op.ADD, "file", ["3"]),
        (Op.UPDATE, "file", ["1"]),
        # Names are unique per source (as upstream: a mirror pod from the API
        # shares its static pod's name); within one source the first one wins.
        (Op.ADD, "http", ["9", "7"]),
        (Op.ADD, "api", ["20"]),
        (Op.UPDATE, "api", ["20"]),
        (Op.RECONCILE, "api", ["20"]),
        (Op.REMOVE, "api", ["20"]),
    ]


async def test_http_source_sends_pods_and_keeps_them_when_the_url_fails() -> None:
    state = {"status": 200, "body": manifest("from-url")}

    async def handler(req: web.Request) -> web.Response:
        assert req.headers.get("X-Token") == "t1"
        return web.Response(status=state["status"], text=state["body"])

    app = web.Application()
    app.router.add_get("/pods", handler)
    async with serving(app) as port:
        cfg = PodConfig()
        src = HTTPSource(f"http://127.0.0.1:{port}/pods", {"X-Token": ["t1"]}, "n1", 0.05, cfg)
        stop = asyncio.Event()
        task = asyncio.create_task(src.run(stop))
        try:
            u = await asyncio.wait_for(cfg.updates.get(), 5)
            assert u.op is Op.ADD and u.pods[0]["metadata"]["name"] == "from-url-n1"
            assert u.pods[0]["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
            state["status"] = 500
            await asyncio.sleep(0.3)
            assert cfg.updates.empty() and len(cfg.all_pods()) == 1  # a failing URL removes nothing
        finally:
            stop.set()
            await task


def test_invalid_manifests_are_reported_by_file_and_skipped(tmp_path: Path) -> None:
    bad = {
        "yaml.yaml": "kind: Pod\nmetadata: [unclosed\n",
        "kind.yaml": manifest("x").replace("kind: Pod", "kind: Deployment"),
        "nocontainers.yaml": yaml.safe_dump(
            {"kind": "Pod", "metadata": {"name": "n"}, "spec": {"containers": []}}
        ),
        "badname.yaml": manifest("Bad_Name"),
        "dup.yaml": yaml.safe_dump(
            {
                "kind": "Pod",
                "metadata": {"name": "d"},
                "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "c", "image": "i"}]},
            }
        ),
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "good.yaml").write_text(manifest("good"))
    pods, errs = read_pods(str(tmp_path), "n1")
    assert [p["metadata"]["name"] for p in pods] == ["good-n1"]
    assert len(errs) == len(bad)
    by_file = {Path(e.split(":", 1)[0]).name: e for e in errs}
    assert set(by_file) == set(bad)
    assert "YAML" in by_file["yaml.yaml"]
    assert "kind" in by_file["kind.yaml"]
    assert "spec.containers: Required value" in by_file["nocontainers.yaml"]
    assert "metadata.name" in by_file["badname.yaml"]
    assert "Duplicate value" in by_file["dup.yaml"]
    # fixing one file brings that pod in without disturbing the others
    (tmp_path / "kind.yaml").write_text(manifest("fixed"))
    pods, errs = read_pods(str(tmp_path), "n1")
    assert sorted(p["metadata"]["name"] for p in pods) == ["fixed-n1", "good-n1"]
    assert len(errs) == len(bad) - 1
