"""The kubelet port's TLS: serving certificates (the configured pair, a self-signed
one in --cert-dir, or a rotating one), the client CA bundle, TLS versions and suites."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import threading
from dataclasses import dataclass, field

from kubelet.client.certificate import CertificateSource
from kubelet.util.atomicfile import write_atomic
from kubelet.util.tlsconfig import TLSPolicy

log = logging.getLogger(__name__)


@dataclass
class TLSOptions:
    cert_file: str
    key_file: str
    client_ca_file: str = ""
    policy: TLSPolicy = field(default_factory=TLSPolicy)


def _unusable_pair(cert_path: str, key_path: str) -> str | None:
    """Why the pair cannot serve (missing, unparsable, key not matching), or None."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError, ValueError) as err:
        return str(err) or type(err).__name__
    return None


def ensure_self_signed(cert_dir: str, host: str, ips: list[str]) -> tuple[str, str]:
    """Return (cert, key) paths under cert_dir, generating them on first use.

    Same file names as the Go kubelet (kubelet.crt / kubelet.key), so a restart
    keeps the certificate clients may have pinned.
    """
    cert_path = os.path.join(cert_dir, "kubelet.crt")
    key_path = os.path.join(cert_dir, "kubelet.key")
    if os.path.exists(cert_path) or os.path.exists(key_path):
        problem = _unusable_pair(cert_path, key_path)
        if problem is None:
            return cert_path, key_path
        # Our own pair, not the operator's: made again rather than failing every
        # start (a crash loop) over a file torn by an older version or the disk.
        log.warning(
            "Self-signed serving certificate in %s is unusable (%s); generating a new one",
            cert_dir,
            problem,
        )
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(cert_dir, mode=0o700, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")])
    alt: list[x509.GeneralName] = [x509.DNSName(host), x509.DNSName("localhost")]
    for ip in {"127.0.0.1", *ips}:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            continue
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    # The key first: a crash between the two leaves a pair that fails to load
    # and is made again at the next start.
    write_atomic(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
        0o600,
    )
    write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    log.info("Generated self-signed serving certificate %s", cert_path)
    return cert_path, key_path


def hostname() -> str:
    return socket.gethostname().lower()


def server_context(opts: TLSOptions, reload: bool = True) -> ssl.SSLContext:
    """The kubelet port's context for a serving pair from files. reload: the
    ReloadKubeletServerCertificateFile gate (beta, on): a pair rewritten on
    disk serves from the next handshake on; off, the pair read at start stays."""
    pair = FilePair(opts.cert_file, opts.key_file) if reload else (opts.cert_file, opts.key_file)
    return ServingContext(pair, opts.client_ca_file, opts.policy).context


class ServingContext:
    """The kubelet port's SSL context. Each handshake picks (in the SNI callback,
    which OpenSSL calls for every ClientHello) a context made for the serving
    pair and the client CA bundle current at that moment:
    - a rotated serving certificate (serverTLSBootstrap) reaches new
      connections while open ones (kubectl logs -f, exec) keep theirs; until
      one is issued every handshake fails, as upstream's GetCertificate does;
    - the client CA file (authentication.x509.clientCAFile) is reloaded when
      it changes, as upstream's dynamic CA content: a client certificate of a
      new CA is accepted and one of a removed CA refused from the next
      handshake on. A file that no longer parses keeps the previous bundle.
    Sessions are not resumed (no tickets), so a certificate is verified
    against the current bundle at every connection.
    tlsMinVersion and tlsCipherSuites apply to every context (TLSPolicy)."""

    def __init__(
        self,
        pair: CertificateSource | FilePair | tuple[str, str],
        client_ca_file: str = "",
        policy: TLSPolicy | None = None,
    ) -> None:
        self.pair = pair
        self.client_ca = _CABundle(client_ca_file)
        self.policy = policy or TLSPolicy()
        self.context = self._new(announce=True)
        self.context.sni_callback = self._pick
        self._loaded: tuple[object, int, ssl.SSLContext] | None = None
        self._warned = False
        # Handshakes run on a thread pool (server/tlsproto.py): one pick at a
        # time, so a rotation loads one context and counts one version.
        self._lock = threading.Lock()

    def _new(self, announce: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        for level, note in self.policy.apply(ctx):
            if announce:
                log.log(level, "%s", note)
        ctx.options |= ssl.OP_NO_TICKET
        ctx.num_tickets = 0
        if self.client_ca.path:
            # Client certificates are optional: anonymous requests are judged by authn.
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(cadata=self.client_ca.current())
        return ctx

    def _current_pair(self) -> tuple[object, str, str | None] | None:
        if isinstance(self.pair, tuple):
            return self.pair, self.pair[0], self.pair[1]
        if isinstance(self.pair, FilePair):
            f = self.pair
            return ("file", f.refresh()), f.cert_file, f.key_file
        cert = self.pair.current_certificate()
        return None if cert is None else (cert, cert.path, None)

    def _pick(
        self, conn: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext
    ) -> int | None:
        with self._lock:
            return self._pick_locked(conn)

    def _pick_locked(self, conn: ssl.SSLObject) -> int | None:
        pair = self._current_pair()
        if pair is None:
            if not self._warned:
                log.warning(
                    "TLS handshake refused: no serving certificate available for the kubelet"
                )
                self._warned = True
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        ca_version = self.client_ca.refresh()
        loaded = self._loaded
        if loaded is None or loaded[0] != pair[0] or loaded[1] != ca_version:
            ctx = self._new()
            try:
                ctx.load_cert_chain(pair[1], pair[2])
            except (OSError, ssl.SSLError) as err:
                log.error("Cannot load serving certificate %s: %s", pair[1], err)
                if loaded is None:
                    return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
                conn.context = loaded[2]  # the last pair that loaded keeps serving
                return None
            if loaded is None or loaded[0] != pair[0]:
                log.info("Serving with certificate %s", pair[1])
            loaded = (pair[0], ca_version, ctx)
            self._loaded = loaded
            self._warned = False
        conn.context = loaded[2]
        return None


class _WatchedFiles:
    """Files re-read when one of them changes (a stat of each per handshake):
    content that loads becomes the current one and its version moves; content
    that does not is logged and the last good one stays, as upstream's dynamic
    file content. The first read must work (a startup error if not)."""

    what = "file"

    def __init__(self, *paths: str) -> None:
        self.paths = paths
        self.version = 0
        self._content = self._load()
        self._stamp: tuple[tuple[int, int, int, int], ...] | None = self._stamps()

    def _load(self) -> str:
        raise NotImplementedError

    def _stamps(self) -> tuple[tuple[int, int, int, int], ...]:
        return tuple(_stamp(p) for p in self.paths)

    def refresh(self) -> int:
        try:
            stamp = self._stamps()
        except OSError as err:
            log.error("%s %s: %s; keeping the previous one", self.what, self.paths[0], err)
            return self.version
        if stamp == self._stamp:
            return self.version
        self._stamp = stamp
        try:
            content = self._load()
        except (OSError, ValueError) as err:
            log.error("%s %s: %s; keeping the previous one", self.what, self.paths[0], err)
            return self.version
        if content != self._content:
            self._content = content
            self.version += 1
            log.info("Loaded a new %s from %s", self.what, self.paths[0])
        return self.version


class FilePair(_WatchedFiles):
    """The serving pair from files (ReloadKubeletServerCertificateFile)."""

    what = "serving certificate"

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        try:
            super().__init__(cert_file, key_file)
        except ValueError as err:
            raise ValueError(f"serving certificate {cert_file}: {err}") from err

    def _load(self) -> str:
        problem = _unusable_pair(self.cert_file, self.key_file)
        if problem is not None:
            raise ValueError(problem)
        return "\0".join(_read_text(p) for p in self.paths)


class _CABundle(_WatchedFiles):
    """The client CA file (authentication.x509.clientCAFile); none: version 0."""

    what = "client CA bundle"

    def __init__(self, path: str) -> None:
        self.path = path
        if path:
            super().__init__(path)
        else:
            self.paths, self.version, self._content, self._stamp = (), 0, "", None

    def current(self) -> str:
        return self._content

    def refresh(self) -> int:
        return super().refresh() if self.path else 0

    def _load(self) -> str:
        pem = _read_text(self.path)
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.load_verify_locations(cadata=pem)
        except ssl.SSLError as err:
            raise ValueError(f"no valid CA certificate in it ({err})") from err
        return pem


def _stamp(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return fh.read(4 * 1024 * 1024)


# serverTLSBootstrap's name for it: the same context over a rotating source.
RotatingServerContext = ServingContext
