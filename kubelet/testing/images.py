"""Container images made locally (no registry): OCI image tarballs from Debian's
busybox-static, and a tiny static pause binary built with the C compiler.

The upstream e2e tests name their images in test/utils/image/manifest.go; the
ones the node conformance tests run are made here under exactly those names:
busybox and pause (the same layers as above), agnhost and nonewprivs (busybox
plus a static Go binary from hack/build-control-plane.sh; agnhost also gets the
host's curl with its libraries, which the lifecycle hook tests call), nonroot
(busybox with USER 1234).

    python -m kubelet.testing.images DIR [--e2e BINDIR]   # writes the .tar files
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field

from kubelet.testing.oci import layer_tar, write_oci_tar

BUSYBOX_REF = "docker.io/library/busybox:1.36"
PAUSE_REF = "registry.k8s.io/pause:3.10"

# Names and tags as test/utils/image/manifest.go of k8s.io/kubernetes v1.34.4.
E2E_REGISTRY = "registry.k8s.io/e2e-test-images"
E2E_BUSYBOX_REF = f"{E2E_REGISTRY}/busybox:1.37.0-1"
E2E_PAUSE_REF = "registry.k8s.io/pause:3.10.1"
AGNHOST_REF = f"{E2E_REGISTRY}/agnhost:2.56"
NONEWPRIVS_REF = f"{E2E_REGISTRY}/nonewprivs:1.3"
NONROOT_REF = f"{E2E_REGISTRY}/nonroot:1.4"
# Named by the tests but not made here (their servers come from other
# distributions' images); a test that needs them to run reports it.
E2E_UNAVAILABLE = (
    f"{E2E_REGISTRY}/nginx:1.14-4",
    f"{E2E_REGISTRY}/httpd:2.4.38-4",
)
ALPINE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
    dirs = ["bin", "etc", "tmp", "root", "proc", "sys", "dev", "home", "usr", "usr/bin", "var"]
    # /tmp as in every distribution's image: a pod running as a non-root user
    # (the restricted pod security profile) writes there.
    return layer_tar(files, links, dirs, {"tmp": 0o1777})


def compile_static(source: str, name: str) -> bytes:
    """A small C program, statically linked: the binary's bytes."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError(f"no C compiler to build {name}")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, f"{name}.c"), os.path.join(tmp, name)
        with open(src, "w") as fh:
            fh.write(source)
        subprocess.run(
            [cc, "-static", "-Os", "-s", "-o", out, src], check=True, capture_output=True
        )
        with open(out, "rb") as fh:
            return fh.read()


def pause_layer() -> bytes:
    return layer_tar({"pause": compile_static(PAUSE_C, "pause")}, {}, ["dev", "proc", "sys"])


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def agnhost_layer(agnhost: str, porter_dir: str) -> bytes:
    """What upstream's agnhost Dockerfile adds on top of its base: the binary,
    its agnhost-2 alias, the porter's TLS pair, /uploads, and the users and
    groups some tests look up."""
    files = {
        "agnhost": _read(agnhost),
        "localhost.crt": _read(os.path.join(porter_dir, "localhost.crt")),
        "localhost.key": _read(os.path.join(porter_dir, "localhost.key")),
        "etc/passwd": (
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
            b"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
        ),
        "etc/group": (
            b"root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\n"
            b"group-defined-in-image:x:50000:user-defined-in-image\n"
        ),
    }
    modes = {"agnhost": 0o755}
    return layer_tar(
        files, {"agnhost-2": "agnhost"}, ["uploads", "home/user-defined-in-image"], modes
    )


def host_binaries_layer(binaries: list[str]) -> bytes:
    """Host binaries with every shared library ldd names, at the same paths
    (symlinks followed): upstream's agnhost has curl from its distribution,
    and Debian builds none statically."""
    files: dict[str, bytes] = {}
    for binary in binaries:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        libs = re.findall(r"(/\S+) \(0x", out)
        for path in [binary, *libs]:
            files[path.lstrip("/")] = _read(path)
    dirs = sorted({os.path.dirname(name) for name in files} - {""})
    parents: set[str] = set()
    for d in dirs:
        parts = d.split("/")
        parents.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    modes = {name: 0o755 for name in files}
    return layer_tar(files, {}, sorted(parents), modes)


def nonewprivs_layer(nnp: str) -> bytes:
    # setuid root: the test checks that allowPrivilegeEscalation=false defeats it.
    files = {"usr/local/bin/nnp": _read(nnp)}
    return layer_tar(files, {}, ["usr/local", "usr/local/bin"], {"usr/local/bin/nnp": 0o4755})


def build_e2e(directory: str, bindir: str, k8s_src: str) -> dict[str, str]:
    """The e2e test images; bindir holds agnhost and nnp, k8s_src is the
    k8s.io/kubernetes module source (for agnhost's porter certificates)."""
    os.makedirs(directory, exist_ok=True)
    busybox = busybox_layer()
    porter = os.path.join(k8s_src, "test", "images", "agnhost", "porter")
    curl = shutil.which("curl")
    if curl is None:
        raise RuntimeError("curl not installed (apt-get install curl): agnhost's hooks use it")
    out = {
        E2E_BUSYBOX_REF: write_oci_tar(
            os.path.join(directory, "e2e-busybox.tar"), E2E_BUSYBOX_REF, busybox, [], ["sh"]
        ),
        E2E_PAUSE_REF: write_oci_tar(
            os.path.join(directory, "e2e-pause.tar"), E2E_PAUSE_REF, pause_layer(), ["/pause"], []
        ),
        AGNHOST_REF: write_oci_tar(
            os.path.join(directory, "agnhost.tar"),
            AGNHOST_REF,
            [
                busybox,
                host_binaries_layer([curl]),
                agnhost_layer(os.path.join(bindir, "agnhost"), porter),
            ],
            ["/agnhost"],
            ["pause"],
            env=[ALPINE_PATH],
        ),
        NONEWPRIVS_REF: write_oci_tar(
            os.path.join(directory, "nonewprivs.tar"),
            NONEWPRIVS_REF,
            [busybox, nonewprivs_layer(os.path.join(bindir, "nnp"))],
            [],
            ["nnp"],
            env=[ALPINE_PATH],
        ),
        NONROOT_REF: write_oci_tar(
            os.path.join(directory, "nonroot.tar"),
            NONROOT_REF,
            busybox,
            [],
            ["sh"],
            env=[ALPINE_PATH],
            user="1234",
        ),
    }
    return out


# --- the node e2e suite's images (test/e2e_node and the common specs it imports)

NGINX_REFS = [f"{E2E_REGISTRY}/nginx:1.14-4", f"{E2E_REGISTRY}/nginx:1.15-4"]
IPC_UTILS_REF = f"{E2E_REGISTRY}/ipc-utils:1.3"
KITTEN_REF = f"{E2E_REGISTRY}/kitten:1.7"
NAUTILUS_REF = f"{E2E_REGISTRY}/nautilus:1.7"
# As test/e2e/testing-manifests/sample-device-plugin/*.yaml name it.
SAMPLE_DEVICE_PLUGIN_REF = f"{E2E_REGISTRY}/sample-device-plugin:1.7"
# Named by the suite, not made here: servers from other distributions' images,
# data sets, and an image pinned by digest (no rebuild can match it). A spec
# whose pod cannot pull one of these is reported "not run", never passed or
# failed. (Images the specs mean to be unpullable are not listed.)
NODE_E2E_UNAVAILABLE = (
    f"{E2E_REGISTRY}/httpd:2.4.38-4",
    f"{E2E_REGISTRY}/httpd:2.4.39-4",
    f"{E2E_REGISTRY}/perl:5.26",
    f"{E2E_REGISTRY}/busybox@sha256:a9155b13325b2abef48e71de77bb8ac015412a566829f621d06bfae5c699b1b9",
    f"{E2E_REGISTRY}/node-perf/npb-ep:1.2",
    f"{E2E_REGISTRY}/node-perf/npb-is:1.2",
    f"{E2E_REGISTRY}/node-perf/tf-wide-deep:1.3",
    f"{E2E_REGISTRY}/jessie-dnsutils:1.7",
    f"{E2E_REGISTRY}/regression-issue-74839:1.2",
    f"{E2E_REGISTRY}/resource-consumer:1.13",
    f"{E2E_REGISTRY}/volume/nfs:1.4",
    f"{E2E_REGISTRY}/apparmor-loader:1.4",
    "registry.k8s.io/etcd:3.6.4-0",
    "gcr.io/cadvisor/cadvisor:v0.47.2",
    "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.21",
    "docker.io/nfvpe/sriov-device-plugin:v3.1",
)

# Debian builds busybox without nmeter, which the container lifecycle specs
# use for millisecond timestamps: `nmeter -d0 '%3t' | head -n1`. This is that
# use of it and nothing more (other formats exit 1, naming what is missing).
NMETER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static void line(const char *fmt) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') { putchar(*p); continue; }
        int prec = 0;
        p++;
        if (*p >= '0' && *p <= '6') prec = *p++ - '0';
        if (*p == '%') { putchar('%'); continue; }
        if (*p != 't') {
            fprintf(stderr, "nmeter: %%%c: not in this stand-in (only %%[N]t)\n", *p ? *p : ' ');
            exit(1);
        }
        struct tm tm;
        localtime_r(&tv.tv_sec, &tm);
        printf("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (prec) {
            long div = 1;
            for (int i = prec; i < 6; i++) div *= 10;
            printf(".%0*ld", prec, (long)tv.tv_usec / div);
        }
    }
    putchar('\n');
    fflush(stdout);
}
int main(int argc, char **argv) {
    long delay_ms = 1000;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strncmp(argv[i], "-d", 2)) {
            const char *v = argv[i][2] ? argv[i] + 2 : (i + 1 < argc ? argv[++i] : "1000");
            delay_ms = atol(v);
        } else {
            fprintf(stderr, "nmeter: option %s not in this stand-in (only -d)\n", argv[i]);
            return 1;
        }
    }
    if (i != argc - 1) { fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n"); return 1; }
    for (;;) {
        line(argv[i]);
        if (delay_ms > 0) usleep(delay_ms * 1000);
    }
}
"""

NGINX_CONF = b"""user nginx;
worker_processes 1;
error_log /dev/stderr warn;
pid /run/nginx.pid;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    server {
        listen 80;
        server_name localhost;
        location / { root /usr/share/nginx/html; index index.html; }
    }
}
"""
NGINX_MIME = b"""types {
    text/html html htm;
    text/plain txt;
    application/json json;
    image/jpeg jpg jpeg;
}
"""


@dataclass
class ImageSet:
    """Image tarballs by reference, and the references the suite names that
    could not be made here."""

    tars: dict[str, str]
    unavailable: set[str] = field(default_factory=set)

    @staticmethod
    def refs_in(tar_path: str) -> list[str]:
        """Every reference an image tarball holds (write_oci_tar's annotations)."""
        with tarfile.open(tar_path) as tar:
            member = tar.extractfile("index.json")
            assert member is not None
            index = json.load(member)
        return [
            m["annotations"]["io.containerd.image.name"]
            for m in index["manifests"]
            if "io.containerd.image.name" in m.get("annotations", {})
        ]


def split_ref(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of a tagged reference; docker.io's
    one-word names are under library/."""
    name, _, tag = ref.rpartition(":")
    host, _, repo = name.partition("/")
    if "." not in host and ":" not in host and host != "localhost":
        host, repo = "docker.io", name
    if host == "docker.io" and "/" not in repo:
        repo = f"library/{repo}"
    return host, repo, tag


def debian_root(package: str, cache: str) -> str:
    """The files of a Debian package, unpacked (not installed: no service
    starts, nothing changes on the host) under cache/<package>; returns that dir."""
    root = os.path.join(cache, package)
    if os.path.isdir(root):
        return root
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        download = ["apt-get", "download", package]
        if subprocess.run(download, cwd=tmp, capture_output=True).returncode != 0:
            # A fresh machine may have no package lists yet.
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
            subprocess.run(download, cwd=tmp, check=True, capture_output=True)
        (deb,) = [f for f in os.listdir(tmp) if f.endswith(".deb")]
        unpacked = os.path.join(tmp, "root")
        subprocess.run(["dpkg-deb", "-x", os.path.join(tmp, deb), unpacked], check=True)
        os.rename(unpacked, root)
    return root


def binaries_layer(binaries: dict[str, str]) -> bytes:
    """Binaries at the image paths given (from the host paths given), with
    every shared library ldd names at its host path."""
    files: dict[str, bytes] = {}
    for image_path, host_path in binaries.items():
        out = subprocess.run(["ldd", host_path], capture_output=True, text=True, check=True).stdout
        if "not found" in out:
            raise RuntimeError(f"{host_path}: shared libraries missing on this host:\n{out}")
        files[image_path.lstrip("/")] = _read(host_path)
        for lib in re.findall(r"(/\S+) \(0x", out):
            files[lib.lstrip("/")] = _read(lib)
    parents: set[str] = set()
    for name in files:
        parts = name.split("/")[:-1]
        parents.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return layer_tar(files, {}, sorted(parents), {name: 0o755 for name in files})


def nginx_layer() -> bytes:
    """Debian's nginx where the nginx image has it, serving /usr/share/nginx/html
    on port 80 with its logs on the container's stdout/stderr."""
    files = {
        "etc/nginx/nginx.conf": NGINX_CONF,
        "etc/nginx/mime.types": NGINX_MIME,
        "usr/share/nginx/html/index.html": b"<html><body>Welcome to nginx!</body></html>\n",
        "etc/passwd": (
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
            b"nginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n"
        ),
        "etc/group": b"root:x:0:\nnogroup:x:65534:\nnginx:x:101:nginx\n",
    }
    dirs = ["etc", "etc/nginx", "usr", "usr/share", "usr/share/nginx", "usr/share/nginx/html",
            "var", "var/log", "var/log/nginx", "var/lib", "var/lib/nginx", "var/cache",
            "var/cache/nginx", "run"]  # fmt: skip
    return layer_tar(files, {}, dirs)


def nginx_image(directory: str, debs: str, base: list[bytes]) -> str:
    """The e2e nginx images: Debian's nginx (unpacked into debs) over `base`."""
    nginx = os.path.join(debian_root("nginx", debs), "usr", "sbin", "nginx")
    layers = [*base, binaries_layer({"/usr/sbin/nginx": nginx}), nginx_layer()]
    path = os.path.join(directory, "nginx.tar")
    return write_oci_tar(
        path, NGINX_REFS, layers, [], ["nginx", "-g", "daemon off;"], env=[ALPINE_PATH]
    )


def build_storage(directory: str, bindir: str, k8s_src: str, debs: str) -> dict[str, str]:
    """The storage suites' images: the conformance ones and nginx (the
    volumes suite's exec spec runs a file of the volume in it)."""
    out = build_e2e(directory, bindir, k8s_src)
    out[NGINX_REFS[0]] = nginx_image(directory, debs, [busybox_layer()])
    return out


def build_node_e2e(directory: str, bindir: str, k8s_src: str, debs: str) -> ImageSet:
    """The node e2e suite's images: the conformance ones (build_e2e), with
    busybox (and agnhost over it) given what Debian's busybox lacks (nmeter,
    a UDP netcat); nginx (Debian's, unpacked into debs); ipc-utils (the host's
    util-linux IPC tools); kitten and nautilus (agnhost serving their
    pictures); the sample device plugin (bindir/sample-device-plugin, static)."""
    out = build_e2e(directory, bindir, k8s_src)
    base = [busybox_layer(), layer_tar({"bin/nmeter": compile_static(NMETER_C, "nmeter")}, {}, [])]

    def image(name: str, ref: str | list[str], layers: list[bytes], entry: list[str],
              cmd: list[str]) -> str:  # fmt: skip
        path = os.path.join(directory, f"{name}.tar")
        return write_oci_tar(path, ref, [*base, *layers], entry, cmd, env=[ALPINE_PATH])

    out[E2E_BUSYBOX_REF] = image("e2e-busybox", E2E_BUSYBOX_REF, [], [], ["sh"])
    out[NGINX_REFS[0]] = nginx_image(directory, debs, base)
    ipc = {f"/usr/bin/{t}": f"/usr/bin/{t}" for t in ("ipcs", "ipcmk", "ipcrm")}
    out[IPC_UTILS_REF] = image("ipc-utils", IPC_UTILS_REF, [binaries_layer(ipc)], [], ["sh"])
    # Alpine's busybox nc (agnhost's base) speaks UDP, Debian's does not: the
    # networking specs run `nc -w 1 -u`. OpenBSD's netcat comes first on PATH.
    nc = os.path.join(debian_root("netcat-openbsd", debs), "bin", "nc.openbsd")
    agnhost = [
        host_binaries_layer([shutil.which("curl") or "/usr/bin/curl"]),
        binaries_layer({"/usr/bin/nc": nc}),
        agnhost_layer(
            os.path.join(bindir, "agnhost"),
            os.path.join(k8s_src, "test", "images", "agnhost", "porter"),
        ),
    ]
    out[AGNHOST_REF] = image("agnhost", AGNHOST_REF, agnhost, ["/agnhost"], ["pause"])
    for ref, name in ((KITTEN_REF, "kitten"), (NAUTILUS_REF, "nautilus")):
        html = os.path.join(k8s_src, "test", "images", name, "html")
        page = layer_tar({f: _read(os.path.join(html, f)) for f in os.listdir(html)}, {}, [])
        out[ref] = image(name, ref, [*agnhost, page], ["/agnhost"], ["test-webserver"])
    plugin = layer_tar({"sampledeviceplugin": _read(os.path.join(bindir, "sample-device-plugin"))},
                    {}, [], {"sampledeviceplugin": 0o755})  # fmt: skip
    out[SAMPLE_DEVICE_PLUGIN_REF] = image(
        "sample-device-plugin", SAMPLE_DEVICE_PLUGIN_REF, [plugin],
        ["/sampledeviceplugin", "-alsologtostderr"], [],
    )  # fmt: skip
    return ImageSet(out, set(NODE_E2E_UNAVAILABLE))


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubelet.testing.images")
    ap.add_argument("dir", nargs="?", default=".")
    ap.add_argument("--e2e", metavar="BINDIR", help="also the e2e images (agnhost, nnp in BINDIR)")
    ap.add_argument("--k8s-src", default="", help="k8s.io/kubernetes module source")
    args = ap.parse_args(argv)
    built = build_all(args.dir)
    if args.e2e:
        built.update(build_e2e(args.dir, args.e2e, args.k8s_src))
    for ref, path in built.items():
        print(ref, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
