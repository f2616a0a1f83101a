"""OCI image layouts in a tar (what `ctr images import` takes), written from
uncompressed layers: reproducible (every entry owned by root, mtime 0)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile


def tar_entry(tar: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755,
              link: str = "", directory: bool = False) -> None:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)
    elif link:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    else:
        assert data is not None
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def layer_tar(
    files: dict[str, bytes],
    links: dict[str, str],
    dirs: list[str],
    modes: dict[str, int] | None = None,
) -> bytes:
    modes = modes or {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            tar_entry(tar, d, mode=modes.get(d, 0o755), directory=True)
        for name, data in files.items():
            default = 0o755 if name.startswith(("bin/", "pause")) else 0o644
            tar_entry(tar, name, data, mode=modes.get(name, default))
        for name, target in links.items():
            tar_entry(tar, name, link=target)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def _image_config(
    layer_descs: list[dict[str, object]],
    entrypoint: list[str],
    cmd: list[str],
    env: list[str] | None,
    user: str,
) -> dict[str, object]:
    """The OCI image config: how the image runs and its layers' diff IDs (the
    layers are not compressed, so the diff ID is the layer's digest)."""
    image_config: dict[str, object] = {
        "Entrypoint": entrypoint or None,
        "Cmd": cmd or None,
        "Env": env or ["PATH=/bin:/usr/bin"],
    }
    if user:
        image_config["User"] = user
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descs]},
    }


def _index(manifest_blob: dict[str, object], refs: list[str]) -> dict[str, object]:
    """The layout's index.json: the one manifest under each reference."""
    return {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest_blob,
                "annotations": {
                    "io.containerd.image.name": r,
                    "org.opencontainers.image.ref.name": r.rsplit(":", 1)[1],
                },
            }
            for r in refs
        ],
    }


def write_oci_tar(
    path: str,
    ref: str | list[str],
    layer: bytes | list[bytes],
    entrypoint: list[str],
    cmd: list[str],
    *,
    env: list[str] | None = None,
    user: str = "",
) -> str:
    """An OCI image layout in a tar that `ctr images import` takes; returns path.

    Several references name the same image; layers go bottom first.
    """
    refs = [ref] if isinstance(ref, str) else ref
    layers = [layer] if isinstance(layer, bytes) else layer
    blobs: dict[str, bytes] = {}
    layer_descs = [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, data)}
        for data in layers
    ]
    config = _image_config(layer_descs, entrypoint, cmd, env, user)
    config_desc = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **_blob(blobs, json.dumps(config, sort_keys=True).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": layer_descs,
    }
    manifest_blob = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    with tarfile.open(path, "w") as tar:
        tar_entry(
            tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), mode=0o644
        )
        tar_entry(tar, "index.json", json.dumps(_index(manifest_blob, refs)).encode(), mode=0o644)
        tar_entry(tar, "blobs", directory=True)
        tar_entry(tar, "blobs/sha256", directory=True)
        for digest, data in blobs.items():
            tar_entry(tar, f"blobs/sha256/{digest.split(':')[1]}", data, mode=0o644)
    return path
