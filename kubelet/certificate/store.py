"""Where rotated certificates live on disk (client-go util/certificate's file store).

Each issued pair is one PEM file, ``<prefix>-<timestamp>.pem``, holding the
certificate chain then the private key, mode 0600; ``<prefix>-current.pem`` is a
symlink to the newest. The symlink is replaced through ``<prefix>-updated.pem``
and a rename, so a crash leaves either the old or the new one, never neither.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from kubelet.util.atomicfile import write_atomic

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class NoCertKeyError(Exception):
    """The store has no pair yet (not an I/O problem)."""


@dataclass(frozen=True)
class KeyPair:
    """One certificate (leaf first, then intermediates) and its private key."""

    cert_pem: bytes
    key_pem: bytes
    leaf: x509.Certificate
    key: PrivateKey
    # The file both are read from (what an SSL context loads).
    path: str

    @property
    def not_before(self) -> float:
        return self.leaf.not_valid_before_utc.timestamp()

    @property
    def not_after(self) -> float:
        return self.leaf.not_valid_after_utc.timestamp()

    @property
    def common_name(self) -> str:
        return common_name(self.leaf)

    @property
    def organizations(self) -> list[str]:
        return [
            str(a.value)
            for a in self.leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        ]

    def dns_names(self) -> list[str]:
        return [str(n) for n in _san(self.leaf).get_values_for_type(x509.DNSName)]

    def ip_addresses(self) -> list[str]:
        return [str(ip) for ip in _san(self.leaf).get_values_for_type(x509.IPAddress)]


def common_name(cert: x509.Certificate) -> str:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def _san(cert: x509.Certificate) -> x509.SubjectAlternativeName:
    try:
        return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return x509.SubjectAlternativeName([])


def load_private_key(data: bytes) -> PrivateKey:
    """A PEM private key of a kind TLS certificates use; ValueError otherwise."""
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(
        key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise ValueError(f"unsupported private key type {type(key).__name__}")
    return key


def parse_pair(cert_pem: bytes, key_pem: bytes, path: str) -> KeyPair:
    """Parse and check that the key belongs to the first certificate; ValueError if not."""
    certs = x509.load_pem_x509_certificates(cert_pem)
    key = load_private_key(key_pem)
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if certs[0].public_key().public_bytes(der, pub) != key.public_key().public_bytes(der, pub):
        raise ValueError(f"{path}: the private key does not match the certificate")
    return KeyPair(cert_pem, key_pem, certs[0], key, path)


def load_pair_file(path: str, key_path: str | None = None) -> KeyPair:
    """Read a pair from one combined PEM file, or from a cert file and a key file."""
    with open(path, "rb") as fh:
        data = fh.read()
    key_data = data
    if key_path and key_path != path:
        with open(key_path, "rb") as fh:
            key_data = fh.read()
    try:
        return parse_pair(_blocks(data, b"CERTIFICATE"), _key_block(key_data), path)
    except ValueError as err:
        raise ValueError(f"could not read a cert/key pair from {path!r}: {err}") from err


def _blocks(data: bytes, kind: bytes) -> bytes:
    begin, end = b"-----BEGIN " + kind + b"-----", b"-----END " + kind + b"-----"
    out: list[bytes] = []
    pos = 0
    while (i := data.find(begin, pos)) >= 0:
        j = data.find(end, i)
        if j < 0:
            break
        out.append(data[i : j + len(end)] + b"\n")
        pos = j + len(end)
    if not out:
        raise ValueError(f"no {kind.decode()} block")
    return b"".join(out)


def _key_block(data: bytes) -> bytes:
    """The first private-key block, whichever of the usual PEM types it is."""
    for kind in (b"EC PRIVATE KEY", b"RSA PRIVATE KEY", b"PRIVATE KEY"):
        begin, end = b"-----BEGIN " + kind + b"-----", b"-----END " + kind + b"-----"
        i = data.find(begin)
        j = data.find(end, i) if i >= 0 else -1
        if j >= 0:
            return data[i : j + len(end)] + b"\n"
    raise ValueError("no private key block")


class FileStore:
    """The pairs of one kind (``kubelet-client`` or ``kubelet-server``) in cert_dir.

    `cert_file`/`key_file` are a pair configured elsewhere (a kubeconfig's
    client certificate, tlsCertFile): read when no rotated pair exists yet."""

    def __init__(self, prefix: str, cert_dir: str, cert_file: str = "", key_file: str = "") -> None:
        self.prefix = prefix
        self.cert_dir = cert_dir
        self.cert_file = cert_file
        self.key_file = key_file
        self._recover()

    def _name(self, qualifier: str) -> str:
        return os.path.join(self.cert_dir, f"{self.prefix}-{qualifier}.pem")

    def current_path(self) -> str:
        return self._name("current")

    def _recover(self) -> None:
        # A crash between making "-updated" and renaming it leaves no "-current".
        current, updated = self._name("current"), self._name("updated")
        if os.path.exists(current) or not os.path.islink(updated):
            return
        os.rename(updated, current)

    def current(self) -> KeyPair:
        """The newest pair; NoCertKeyError when there is none, ValueError when unreadable."""
        pair_file = self.current_path()
        if os.path.exists(pair_file):
            return load_pair_file(pair_file)
        if self.cert_file and self.key_file:
            if os.path.exists(self.cert_file) and os.path.exists(self.key_file):
                return load_pair_file(self.cert_file, self.key_file)
        crt = os.path.join(self.cert_dir, self.prefix + ".crt")
        key = os.path.join(self.cert_dir, self.prefix + ".key")
        if os.path.exists(crt) and os.path.exists(key):
            return load_pair_file(crt, key)
        raise NoCertKeyError(
            f"no cert/key files read at {pair_file!r}, ({self.cert_file!r}, {self.key_file!r})"
            f" or ({crt!r}, {key!r})"
        )

    def update(self, cert_pem: bytes, key_pem: bytes, now: float | None = None) -> KeyPair:
        """Write a new pair and make it current; returns it as read back from disk."""
        ts = datetime.datetime.fromtimestamp(
            now if now is not None else datetime.datetime.now().timestamp()
        ).strftime("%Y-%m-%d-%H-%M-%S")
        os.makedirs(self.cert_dir, mode=0o755, exist_ok=True)
        path = self._name(ts)
        data = _blocks(cert_pem, b"CERTIFICATE") + _key_block(key_pem)
        write_atomic(path, data, 0o600)
        pair = load_pair_file(path)
        self._update_symlink(path)
        return pair

    def _update_symlink(self, target: str) -> None:
        current, updated = self._name("current"), self._name("updated")
        for link in (current, updated):
            if os.path.lexists(link) and not os.path.islink(link):
                raise ValueError(f"expected {link!r} to be a symlink but it is a file")
        if os.path.lexists(updated):
            os.remove(updated)
        os.symlink(os.path.abspath(target), updated)
        os.replace(updated, current)
