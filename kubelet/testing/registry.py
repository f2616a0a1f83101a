"""A real image registry on 127.0.0.1 (Debian's docker-registry), filled with
the locally built test images by skopeo, so PullImage runs for real."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field

from kubelet.testing import images


class Unavailable(Exception):
    """The registry cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    directory: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pushed: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, "registry.log")

    def start(self) -> Registry:
        binary = shutil.which("docker-registry")
        if not binary or not shutil.which("skopeo"):
            raise Unavailable(
                "docker-registry or skopeo not installed (apt-get install docker-registry skopeo)"
            )
        os.makedirs(self.directory, exist_ok=True)
        self.port = self.port or _free_port()
        cfg = os.path.join(self.directory, "config.yml")
        with open(cfg, "w") as fh:
            fh.write(
                "version: 0.1\n"
                "log:\n  level: info\n"
                f"storage:\n  filesystem:\n    rootdirectory: {self.directory}/data\n"
                f"http:\n  addr: 127.0.0.1:{self.port}\n"
            )
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([binary, "serve", cfg], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise Unavailable("docker-registry did not answer on /v2/")

    def push(self, oci_tar: str, repo: str, tag: str) -> str:
        ref = f"{self.host}/{repo}:{tag}"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--dest-tls-verify=false",
                f"oci-archive:{oci_tar}",
                f"docker://{ref}",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.pushed.append(ref)
        return ref

    def push_test_images(self) -> str:
        """The busybox image under <host>/kubelet-py/busybox:1.36; returns that reference."""
        tar = images.write_oci_tar(
            os.path.join(self.directory, "busybox.tar"),
            images.BUSYBOX_REF,
            images.busybox_layer(),
            [],
            ["sh"],
        )
        return self.push(tar, "kubelet-py/busybox", "1.36")

    def trust_from_containerd(self, certs_d: str) -> None:
        """Let a containerd with `config_path = certs_d` pull from us over plain HTTP."""
        d = os.path.join(certs_d, self.host)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "hosts.toml"), "w") as fh:
            fh.write(
                f'server = "http://{self.host}"\n\n'
                f'[host."http://{self.host}"]\n'
                '  capabilities = ["pull", "resolve"]\n'
                "  skip_verify = true\n"
            )

    def pulls(self, repo: str) -> int:
        """How many manifest GETs the registry served for repo (from its access log)."""
        try:
            with open(self.log_path, errors="replace") as fh:
                text = fh.read()
        except OSError:
            return 0
        return text.count(f'"GET /v2/{repo}/manifests/')

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
