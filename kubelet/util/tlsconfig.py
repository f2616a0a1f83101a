"""tlsMinVersion / tlsCipherSuites (--tls-min-version / --tls-cipher-suites) with
upstream's names (component-base cli/flag, Go's crypto/tls), applied to an
OpenSSL context.

- Versions: VersionTLS10..VersionTLS13; empty means TLS 1.2, as upstream.
  OpenSSL 3 refuses TLS 1.0/1.1 at its default security level, so asking for
  them lowers that level to 0 (with a warning): the operator gets what the Go
  kubelet would give.
- Suites: Go's names for TLS 1.2 and below map to OpenSSL's names. TLS 1.3
  suites are not configurable in Go (it ignores them in the list and always
  offers all three) nor in Python's ssl: the same here. A list with only TLS
  1.3 names leaves TLS 1.2 nothing to negotiate, so TLS 1.3 becomes the
  minimum. Go's insecure suites are accepted and logged as upstream does;
  the ones this OpenSSL build lacks (RC4, 3DES) are named in a warning.
- An unknown name is a configuration error (every one is listed).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's tls.CipherSuites() for TLS 1.0-1.2 (plus the two legacy CHACHA20 aliases).
SECURE_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
}
# Go's tls.InsecureCipherSuites().
INSECURE_SUITES = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
}
TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)


def problems(min_version: str, suites: list[str]) -> list[str]:
    """Every name that is not one of upstream's, in upstream's words."""
    out = []
    if min_version and min_version not in VERSIONS:
        out.append(f'tlsMinVersion (--tls-min-version): unknown tls version "{min_version}"')
    for s in suites:
        if s not in SECURE_SUITES and s not in INSECURE_SUITES and s not in TLS13_SUITES:
            out.append(
                f"tlsCipherSuites (--tls-cipher-suites): Cipher suite {s} not supported or "
                "doesn't exist"
            )
    return out


@dataclass(frozen=True)
class TLSPolicy:
    min_version: str = ""
    cipher_suites: tuple[str, ...] = ()

    def apply(self, ctx: ssl.SSLContext) -> list[tuple[int, str]]:
        """Set the minimum version and the TLS 1.2 suites on ctx; returns what to
        log, with its level. The names must have passed problems()."""
        notes = [(logging.INFO, f"Use of insecure cipher detected. cipher={s}")
                 for s in self.cipher_suites if s in INSECURE_SUITES]  # fmt: skip
        minimum = VERSIONS.get(self.min_version or "VersionTLS12", ssl.TLSVersion.TLSv1_2)
        openssl, missing = _openssl_suites(self.cipher_suites)
        if missing:
            msg = f"tlsCipherSuites not in this OpenSSL, not offered: {', '.join(missing)}"
            notes.append((logging.WARNING, msg))
        if minimum == ssl.TLSVersion.TLSv1_3 and self.cipher_suites:
            msg = "TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites"
            notes.append((logging.INFO, msg))
        elif self.cipher_suites and not openssl:
            msg = "tlsCipherSuites names no TLS 1.2 suite that can be offered: TLS 1.3 only"
            notes.append((logging.WARNING, msg))
            minimum = ssl.TLSVersion.TLSv1_3
        seclevel = ""
        if minimum < ssl.TLSVersion.TLSv1_2:
            msg = f"tlsMinVersion {self.min_version}: OpenSSL security level lowered to 0"
            notes.append((logging.WARNING, msg))
            seclevel = ":@SECLEVEL=0"
        if openssl and minimum < ssl.TLSVersion.TLSv1_3:
            ctx.set_ciphers(":".join(openssl) + seclevel)
        elif seclevel:
            ctx.set_ciphers("DEFAULT" + seclevel)
        ctx.minimum_version = minimum
        return notes


def _openssl_suites(names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(OpenSSL names this build offers, Go names it does not)."""
    have: list[str] = []
    missing: list[str] = []
    for n in names:
        o = SECURE_SUITES.get(n) or INSECURE_SUITES.get(n)
        if o is None:
            continue  # a TLS 1.3 name
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            probe.set_ciphers(o + ":@SECLEVEL=0")
        except ssl.SSLError:
            missing.append(n)
            continue
        if o not in have:
            have.append(o)
    return have, missing
