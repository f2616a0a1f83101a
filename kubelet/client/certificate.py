"""The small interface TLS users (the API clients, the kubelet server) read a
rotating certificate through: they ask for the current file on each new
connection and never see the manager behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CertificateFile:
    """A PEM file holding a certificate chain and its private key."""

    path: str
    not_after: float  # seconds since the epoch
    # Tells pairs apart even when a rotation rewrote the same file name.
    serial: int = 0


class CertificateSource(Protocol):
    def current_certificate(self) -> CertificateFile | None:
        """The pair to use for a new connection; None while there is none (not
        yet issued, or expired)."""
        ...
