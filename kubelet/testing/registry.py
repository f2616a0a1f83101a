"""A real image registry on 127.0.0.1 (Debian's docker-registry), filled with
the locally built test images by skopeo, so PullImage runs for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from kubelet.testing import images, oci
from kubelet.testing.net import free_port
from kubelet.testing.process import stop_process


class Unavailable(Exception):
    """The registry cannot run here; the message says why."""


@dataclass
class Registry:
    directory: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pushed: list[str] = field(default_factory=list)
    # (user, password): htpasswd basic auth on every request (bcrypt, as the
    # registry requires), so pulls need credentials.
    auth: tuple[str, str] | None = None

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
        self.port = self.port or free_port()
        cfg = os.path.join(self.directory, "config.yml")
        auth = ""
        if self.auth is not None:
            if not shutil.which("htpasswd"):
                raise Unavailable("htpasswd not installed (apt-get install apache2-utils)")
            users = os.path.join(self.directory, "htpasswd")
            line = subprocess.run(
                ["htpasswd", "-Bbn", *self.auth], check=True, capture_output=True, text=True
            ).stdout
            with open(users, "w") as fh:
                fh.write(line.strip() + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: kubelet-py\n    path: {users}\n"
        with open(cfg, "w") as fh:
            fh.write(
                "version: 0.1\n"
                "log:\n  level: info\n"
                f"storage:\n  filesystem:\n    rootdirectory: {self.directory}/data\n"
                f"http:\n  addr: 127.0.0.1:{self.port}\n" + auth
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
            except urllib.error.HTTPError as err:
                if err.code == 401 and self.auth is not None:
                    return self  # up, and asking for credentials
                time.sleep(0.1)
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
                *(["--dest-creds", ":".join(self.auth)] if self.auth else []),
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
        tar = oci.write_oci_tar(
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

    def log_text(self) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def served_manifests(self, repo: str) -> int:
        """Manifest requests for repo answered 200 (with auth: the credentials
        worked): GETs, and the HEAD containerd 2 resolves a tag with when it holds
        the content already."""
        return sum(
            1
            for line in self.log_text().splitlines()
            for verb in ("GET", "HEAD")
            if f'"{verb} /v2/{repo}/manifests/' in line and '" 200 ' in line
        )

    def auth_failures(self, user: str) -> int:
        """Requests that came with `user` and a wrong password."""
        return self.log_text().count(f'error authenticating user \\"{user}\\"')

    def pulls(self, repo: str) -> int:
        """How many times the registry was asked for repo's manifest (GET, or the
        HEAD containerd resolves a tag with when it holds the content already),
        from its access log."""
        try:
            with open(self.log_path, errors="replace") as fh:
                text = fh.read()
        except OSError:
            return 0
        return sum(text.count(f'"{verb} /v2/{repo}/manifests/') for verb in ("GET", "HEAD"))

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
