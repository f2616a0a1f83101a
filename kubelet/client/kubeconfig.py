"""Reading a kubeconfig file: what the kubelet's API clients need of it
(client-go's clientcmd, for --kubeconfig and --bootstrap-kubeconfig).

The current context's cluster and user: the server, its CA (a file or inline
data), insecure-skip-tls-verify, and the user's client certificate and key
(files or inline data), token or tokenFile, basic auth, or an exec credential
plugin (client.authentication.k8s.io v1 / v1beta1). Relative file paths are
relative to the kubeconfig's directory, as client-go resolves them. Inline
data is put in memory-only files (memfd, read through /proc/self/fd) because
Python's TLS takes a client certificate only from a path.

Every field is accounted for. Refused, with the field named: impersonation
(`as`, `as-user-extra`, ...), which would silently change whom the kubelet
acts as if ignored, and the removed auth-provider plugins. Fields that change
only how the server is reached (`tls-server-name`, `proxy-url`) are not
implemented: a warning names them. Fields client-go reads but that change
nothing for a kubelet (`preferences`, a context's `namespace`, extensions
other than the exec plugin's cluster config) get an info line naming them;
`disable-compression` holds without effort: this client never asks for a
compressed response. Any other field is unknown and a warning names it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

log = logging.getLogger(__name__)

EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT = 60.0
TOKEN_FILE_TTL = 60.0  # client-go re-reads a tokenFile about once a minute
# An exec plugin's token is renewed this long before it expires (at most a
# quarter of its life ahead).
RENEW_AHEAD = 60.0
_REFUSED_USER = ("as", "as-uid", "as-groups", "as-user-extra", "auth-provider")
_WARNED_CLUSTER = ("tls-server-name", "proxy-url")
# The cluster extension whose value an exec plugin gets as spec.cluster.config.
EXEC_EXTENSION = "client.authentication.k8s.io/exec"
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
_CLUSTER_INFO = (
    "server",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "certificate-authority-data",
    "proxy-url",
    "disable-compression",
)
# Per section: the fields read here, and those that change nothing for a kubelet.
_READ = {
    "": ("apiVersion", "kind", "clusters", "contexts", "users", "current-context"),
    "cluster": (
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "disable-compression",
        *_WARNED_CLUSTER,
    ),
    "context": ("cluster", "user"),
    "user": (
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
        "exec",
        *_REFUSED_USER,
    ),
    "exec": (
        "apiVersion",
        "command",
        "args",
        "env",
        "installHint",
        "provideClusterInfo",
        "interactiveMode",
    ),
}
_NO_EFFECT = {
    "": ("preferences", "extensions"),
    "cluster": ("extensions",),
    "context": ("namespace", "extensions"),
    "user": ("extensions",),
}


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message says why."""


@dataclass
class ConnectionConfig:
    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    # Called per request: the Authorization header's value, or None.
    token: Callable[[], str | None] | None = None


def load_kubeconfig(path: str) -> ConnectionConfig:
    """The current context of the kubeconfig at `path`; KubeconfigError (a
    ValueError) naming the file and the reason when it cannot be used."""
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        return _load(doc, os.path.dirname(os.path.abspath(path)))
    except (OSError, yaml.YAMLError, KubeconfigError) as err:
        raise KubeconfigError(f"invalid kubeconfig {path!r}: {err}") from err
    except (LookupError, TypeError, AttributeError) as err:  # a field of the wrong shape
        raise KubeconfigError(f"invalid kubeconfig {path!r}: malformed: {err!r}") from err


def _load(doc: object, base: str) -> ConnectionConfig:
    if not isinstance(doc, Mapping):
        raise KubeconfigError("not a mapping")
    current = doc.get("current-context")
    if not current:
        raise KubeconfigError("no current-context")
    ctx = _named(doc, "contexts", "context", current)
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"))
    user = _named(doc, "users", "user", ctx.get("user")) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"cluster {ctx.get('cluster')!r} has no server")
    for section, fields in (("", doc), ("cluster", cluster), ("context", ctx), ("user", user)):
        _account(section, fields)
    for f in _WARNED_CLUSTER:
        if cluster.get(f):
            log.warning("kubeconfig: cluster.%s is not implemented by this kubelet; ignored", f)
    refused = [f for f in _REFUSED_USER if user.get(f)]
    if refused:
        raise KubeconfigError(f"user fields not supported: {', '.join(refused)}")
    files = _Files(base)
    conn = ConnectionConfig(
        host=str(server).rstrip("/"),
        ca_file=files.path_or_data(cluster, "certificate-authority", "ca.crt"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
    )
    conn.cert_file = files.path_or_data(user, "client-certificate", "client.crt")
    conn.key_file = files.path_or_data(user, "client-key", "client.key")
    if user.get("exec"):
        conn.token = _exec_credentials(conn, user["exec"], files, cluster)
    else:
        conn.token = _credentials(user, files)
    if bool(conn.cert_file) != bool(conn.key_file):
        raise KubeconfigError("a client certificate needs its key and the key its certificate")
    return conn


def _account(section: str, fields: Mapping[str, Any]) -> None:
    """A log line for each field set in `section` that is not read here."""
    where = f"{section}." if section else ""
    for name, value in fields.items():
        if name in _READ[section] or (
            section == "cluster" and name == "extensions" and _only_exec(value)
        ):
            continue
        if name not in _NO_EFFECT.get(section, ()):
            log.warning("kubeconfig: unknown field %s%s; ignored", where, name)
        elif value:
            log.info("kubeconfig: %s%s has no effect on a kubelet; not read", where, name)


def _only_exec(extensions: list[Mapping[str, Any]] | None) -> bool:
    """Whether the only cluster extension is the exec plugin's, which is read."""
    return all(e.get("name") == EXEC_EXTENSION for e in extensions or [])


def _named(doc: Mapping[str, Any], section: str, key: str, name: object) -> Mapping[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(key) or {}
            if not isinstance(value, Mapping):
                raise KubeconfigError(f"{section} {name!r}: not a mapping")
            return value
    raise KubeconfigError(f"{key} {name!r} not found in {section}")


class _Files:
    """Paths in the kubeconfig, and inline data as memory-only files."""

    def __init__(self, base: str) -> None:
        self.base = base

    def path_or_data(self, section: Mapping[str, Any], field: str, name: str) -> str | None:
        data = section.get(f"{field}-data")
        if data:
            return self.write(name, _b64(data, f"{field}-data"))
        path = section.get(field)
        if not path:
            return None
        return path if os.path.isabs(path) else os.path.join(self.base, path)

    @staticmethod
    def write(name: str, content: bytes) -> str:
        """A memfd (ssl loads keys only from a path): the data never reaches a
        disk and goes with the process, even a killed one. Its descriptor stays
        open (close-on-exec) for the process's life; only this process, and
        root, can open the path."""
        fd = os.memfd_create(f"kubeconfig-{name}")
        os.fchmod(fd, 0o600)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        return f"/proc/self/fd/{fd}"


def _b64(value: object, field: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as err:
        raise KubeconfigError(f"{field}: not base64: {err}") from None


def _credentials(user: Mapping[str, Any], files: _Files) -> Callable[[], str | None] | None:
    if user.get("token"):
        header = f"Bearer {user['token']}"
        return lambda: header
    if user.get("tokenFile"):
        return _TokenFile(files.path_or_data(user, "tokenFile", "token") or "")
    if user.get("username"):
        raw = f"{user['username']}:{user.get('password', '')}".encode()
        basic = "Basic " + base64.b64encode(raw).decode()
        return lambda: basic
    return None


def _exec_credentials(
    conn: ConnectionConfig, spec: object, files: _Files, cluster: Mapping[str, Any]
) -> Callable[[], str | None] | None:
    if not isinstance(spec, Mapping):
        raise KubeconfigError("exec: not a mapping")
    plugin = _ExecPlugin(spec, cluster, files)
    cred = plugin.run()
    if cred.get("clientCertificateData"):
        # Taken once: a kubelet's client certificate is renewed by its own
        # rotation, not by a plugin run per request.
        conn.cert_file = files.write("exec-client.crt", str(cred["clientCertificateData"]).encode())
        conn.key_file = files.write("exec-client.key", str(cred.get("clientKeyData", "")).encode())
    return plugin.header if cred.get("token") else None


class _TokenFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._value: str | None = None
        self._read_at = -TOKEN_FILE_TTL
        self()  # a missing or unreadable file is found now, not at the first request

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now - self._read_at >= TOKEN_FILE_TTL:
            try:
                with open(self.path) as fh:
                    self._value = fh.read().strip()
            except OSError as err:
                if self._value is None:
                    raise KubeconfigError(f"tokenFile: {err}") from None
                log.warning(
                    "kubeconfig tokenFile %s: %s; using the token read before", self.path, err
                )
            self._read_at = now
        return f"Bearer {self._value}" if self._value else None


class _ExecPlugin:
    """An exec credential plugin: run at load, and again before its token expires."""

    def __init__(self, spec: Mapping[str, Any], cluster: Mapping[str, Any], files: _Files) -> None:
        self.version = spec.get("apiVersion")
        if self.version not in EXEC_VERSIONS:
            raise KubeconfigError(f"exec: apiVersion {self.version!r} not in {EXEC_VERSIONS}")
        if not spec.get("command"):
            raise KubeconfigError("exec: no command")
        _account("exec", spec)
        self.argv = [str(spec["command"]), *(str(a) for a in spec.get("args") or [])]
        self.env = {str(e["name"]): str(e.get("value") or "") for e in spec.get("env") or []}
        self.interactive = _interactive(spec.get("interactiveMode"), self.version)
        info: dict[str, Any] = {"interactive": self.interactive}
        if spec.get("provideClusterInfo"):
            info["cluster"] = _cluster_info(cluster, files)
        self.exec_info = json.dumps(
            {"apiVersion": self.version, "kind": "ExecCredential", "spec": info}
        )
        self.install_hint = str(spec.get("installHint") or "")
        self._token: str | None = None
        self._expires: float | None = None
        self._renew_at: float | None = None
        self._renewing = threading.Lock()

    def run(self) -> Mapping[str, Any]:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self.exec_info}
        try:
            out = subprocess.run(
                self.argv,
                env=env,
                stdin=None if self.interactive else subprocess.DEVNULL,
                capture_output=True,
                timeout=EXEC_TIMEOUT,
                check=True,
            ).stdout
            doc = json.loads(out)
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            hint = f" ({self.install_hint})" if self.install_hint else ""
            raise KubeconfigError(f"exec plugin {self.argv[0]}: {err}{hint}") from None
        if not isinstance(doc, Mapping) or doc.get("apiVersion") != self.version:
            raise KubeconfigError(
                f"exec plugin {self.argv[0]}: not an {self.version} ExecCredential"
            )
        status = doc.get("status") or {}
        expires = _expiry(status.get("expirationTimestamp"))
        now = time.time()
        self._renew_at = (
            None if expires is None else expires - min(RENEW_AHEAD, (expires - now) / 4)
        )
        self._token, self._expires = status.get("token") or None, expires
        return status

    def header(self) -> str | None:
        """Called per request on the event loop. Near its expiry the token is
        renewed on a thread (a plugin run can take seconds: a cloud CLI) while
        requests go on with the old one; only a token already expired makes
        the caller wait, as client-go's does."""
        now = time.time()
        if self._expires is not None and now >= self._expires:
            with self._renewing:
                if self._expires is not None and time.time() >= self._expires:
                    self.run()
        elif self._renew_at is not None and now >= self._renew_at:
            if self._renewing.acquire(blocking=False):
                threading.Thread(target=self._renew, name="exec-credential", daemon=True).start()
        return f"Bearer {self._token}" if self._token else None

    def _renew(self) -> None:
        try:
            self.run()
        except KubeconfigError as err:
            # The old token still serves until it expires; then header() runs
            # the plugin again and the caller sees the error.
            log.warning("renewing the kubeconfig exec credential: %s", err)
            self._renew_at = None
        finally:
            self._renewing.release()


def _interactive(mode: object, version: object) -> bool:
    """Whether the plugin gets the kubelet's stdin, by client-go's rules: v1
    must say, v1beta1 defaults to IfAvailable, Always needs a terminal."""
    if mode is None and version == EXEC_VERSIONS[0]:
        raise KubeconfigError(f"exec: interactiveMode must be specified for {version}")
    if mode is None:
        mode = "IfAvailable"
    if mode not in INTERACTIVE_MODES:
        raise KubeconfigError(f"exec: interactiveMode must be one of {INTERACTIVE_MODES}")
    tty = os.isatty(0)
    if mode == "Always" and not tty:
        raise KubeconfigError("exec: interactiveMode Always, but standard input is not a terminal")
    return mode != "Never" and tty


def _cluster_info(cluster: Mapping[str, Any], files: _Files) -> dict[str, Any]:
    """spec.cluster of the ExecCredential: the cluster as the plugin sees it
    (a CA file's content as certificate-authority-data, as client-go loads
    it), with the exec extension's value as its config."""
    info = {k: cluster[k] for k in _CLUSTER_INFO if k in cluster}
    ca = cluster.get("certificate-authority")
    if ca and "certificate-authority-data" not in info:
        path = files.path_or_data(cluster, "certificate-authority", "ca.crt") or ""
        try:
            with open(path, "rb") as fh:
                info["certificate-authority-data"] = base64.b64encode(fh.read()).decode()
        except OSError as err:
            raise KubeconfigError(f"certificate-authority {ca}: {err}") from None
    for ext in cluster.get("extensions") or []:
        if ext.get("name") == EXEC_EXTENSION:
            info["config"] = ext.get("extension")
    return info


def _expiry(stamp: object) -> float | None:
    if not stamp:
        return None
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError as err:
        raise KubeconfigError(f"exec: expirationTimestamp: {err}") from None
