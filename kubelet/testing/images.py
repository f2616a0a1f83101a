"""Container images made locally (no registry): OCI image tarballs from Debian's
busybox-static, and a tiny static pause binary built with the C compiler.

    python -m kubelet.testing.images DIR   # writes busybox.tar and pause.tar
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

BUSYBOX_REF = "docker.io/library/busybox:1.36"
PAUSE_REF = "registry.k8s.io/pause:3.10"

PAUSE_C = r"""
/* The sandbox's placeholder process: sleep until told to stop. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGINT, done);
    signal(SIGTERM, done);
    for (;;) pause();
}
"""


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755,
         link: str = "", directory: bool = False) -> None:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif link:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    else:
        assert data is not None
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def _layer(files: dict[str, bytes], links: dict[str, str], dirs: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            _add(tar, d, directory=True)
        for name, data in files.items():
            _add(tar, name, data, mode=0o755 if name.startswith(("bin/", "pause")) else 0o644)
        for name, target in links.items():
            _add(tar, name, link=target)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def write_oci_tar(path: str, ref: str, layer: bytes, entrypoint: list[str], cmd: list[str]) -> str:
    """An OCI image layout in a tar that `ctr images import` takes; returns path."""
    blobs: dict[str, bytes] = {}
    layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, layer)}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint or None,
            "Cmd": cmd or None,
            "Env": ["PATH=/bin:/usr/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    config_desc = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **_blob(blobs, json.dumps(config, sort_keys=True).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_desc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
        "annotations": {
            "io.containerd.image.name": ref,
            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
        },
    }
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    with tarfile.open(path, "w") as tar:
        _add(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), mode=0o644)
        _add(tar, "index.json", json.dumps(index).encode(), mode=0o644)
        _add(tar, "blobs", directory=True)
        _add(tar, "blobs/sha256", directory=True)
        for digest, data in blobs.items():
            _add(tar, f"blobs/sha256/{digest.split(':')[1]}", data, mode=0o644)
    return path


def busybox_layer(busybox: str = "/bin/busybox") -> bytes:
    with open(busybox, "rb") as fh:
        binary = fh.read()
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    links = {f"bin/{a}": "busybox" for a in applets if a != "busybox"}
    files = {
        "bin/busybox": binary,
        "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        "etc/group": b"root:x:0:\nnogroup:x:65534:\n",
    }
    return _layer(files, links, ["bin", "etc", "tmp", "root", "proc", "sys", "dev"])


def pause_layer() -> bytes:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler to build the pause binary")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "pause.c"), os.path.join(tmp, "pause")
        with open(src, "w") as fh:
            fh.write(PAUSE_C)
        subprocess.run(
            [cc, "-static", "-Os", "-s", "-o", out, src], check=True, capture_output=True
        )
        with open(out, "rb") as fh:
            return _layer({"pause": fh.read()}, {}, ["dev", "proc", "sys"])


def build_all(directory: str) -> dict[str, str]:
    os.makedirs(directory, exist_ok=True)
    return {
        BUSYBOX_REF: write_oci_tar(
            os.path.join(directory, "busybox.tar"), BUSYBOX_REF, busybox_layer(), [], ["sh"]
        ),
        PAUSE_REF: write_oci_tar(
            os.path.join(directory, "pause.tar"), PAUSE_REF, pause_layer(), ["/pause"], []
        ),
    }


if __name__ == "__main__":
    for ref, path in build_all(sys.argv[1] if len(sys.argv) > 1 else ".").items():
        print(ref, path)
