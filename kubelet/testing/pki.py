"""A throwaway PKI for a test control plane: CA, serving and client certs,
service-account keys — generated in Python, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class CertPair:
    cert: str
    key: str


def _write(path: str, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600 if private else 0o644)
    with open(fd, "wb") as fh:
        fh.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class PKI:
    def __init__(self, directory: str, days: int = 7) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.now = datetime.datetime.now(datetime.UTC)
        self.days = days
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubelet-py-test-ca")])
        ca = (
            self._builder(self.ca_name, self.ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca = CertPair(os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key"))
        _write(self.ca.cert, ca.public_bytes(serialization.Encoding.PEM))
        _write(self.ca.key, _key_pem(self.ca_key), private=True)

    def _builder(
        self, subject: x509.Name, public_key: CertificatePublicKeyTypes
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.ca_name if hasattr(self, "ca_name") else subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(hours=1))
            .not_valid_after(self.now + datetime.timedelta(days=self.days))
        )

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: list[str] | None = None,
        dns: list[str] | None = None,
        ips: list[str] | None = None,
        server: bool = False,
        client: bool = True,
    ) -> CertPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations or []]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        b = self._builder(x509.Name(attrs), key.public_key()).add_extension(
            x509.ExtendedKeyUsage(usages), critical=False
        )
        alt: list[x509.GeneralName] = [x509.DNSName(d) for d in dns or []]
        alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []]
        if alt:
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = b.sign(self.ca_key, hashes.SHA256())
        pair = CertPair(
            os.path.join(self.dir, f"{name}.crt"), os.path.join(self.dir, f"{name}.key")
        )
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(pair.key, _key_pem(key), private=True)
        return pair

    def service_account_keys(self) -> CertPair:
        """RSA key pair for signing service-account tokens (pub in .crt slot)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pair = CertPair(os.path.join(self.dir, "sa.pub"), os.path.join(self.dir, "sa.key"))
        _write(
            pair.cert,
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        _write(pair.key, _key_pem(key), private=True)
        return pair
