"""Serving certificates: the configured pair, or a self-signed one in --cert-dir."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
from dataclasses import dataclass

from kubelet.certificate.source import CertificateFile, CertificateSource
from kubelet.util.atomicfile import write_atomic

log = logging.getLogger(__name__)


@dataclass
class TLSOptions:
    cert_file: str
    key_file: str
    client_ca_file: str = ""


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


def server_context(opts: TLSOptions) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(opts.cert_file, opts.key_file)
    if opts.client_ca_file:
        # Client certificates are optional: anonymous requests are judged by authn.
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(opts.client_ca_file)
    return ctx


def hostname() -> str:
    return socket.gethostname().lower()


class RotatingServerContext:
    """A server SSL context whose certificate comes from a CertificateSource
    (serverTLSBootstrap): each handshake picks the pair current at that moment,
    so a rotation reaches new connections while open ones (kubectl logs -f,
    exec streams) go on with the certificate they started with. Until a
    certificate is issued every handshake fails, as upstream's GetCertificate
    does ("no serving certificate available for the kubelet")."""

    def __init__(self, source: CertificateSource, client_ca_file: str = "") -> None:
        self.source = source
        self.client_ca_file = client_ca_file
        self.context = self._new()
        self.context.sni_callback = self._pick
        self._loaded: tuple[CertificateFile, ssl.SSLContext] | None = None
        self._warned = False

    def _new(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_ca_file:
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(self.client_ca_file)
        return ctx

    def _pick(
        self, conn: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext
    ) -> int | None:
        cert = self.source.current_certificate()
        if cert is None:
            if not self._warned:
                log.warning(
                    "TLS handshake refused: no serving certificate available for the kubelet"
                )
                self._warned = True
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        loaded = self._loaded
        if loaded is None or loaded[0] != cert:
            ctx = self._new()
            try:
                ctx.load_cert_chain(cert.path)
            except (OSError, ssl.SSLError) as err:
                log.error("Cannot load serving certificate %s: %s", cert.path, err)
                return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
            loaded = (cert, ctx)
            self._loaded = loaded
            self._warned = False
            log.info("Serving with certificate %s", cert.path)
        conn.context = loaded[1]
        return None
