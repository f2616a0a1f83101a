"""The rotating certificate manager (client-go util/certificate's manager).

It holds the current pair, renews it at a jittered 70-90% of its lifetime
through a CertificateSigningRequest, stores the new pair (store.FileStore) and
hands it out through CertificateSource. Renewal retries with back-off (2 s
doubling, five times, then every 32 s), as upstream."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from prometheus_client import Counter, Histogram

from kubelet.certificate.csr import (
    CSRClient,
    CSRError,
    Template,
    generate_key,
    key_pem,
    make_csr,
    request_certificate,
    usages_for,
    wait_for_certificate,
)
from kubelet.certificate.store import FileStore, KeyPair, NoCertKeyError, parse_pair
from kubelet.client.certificate import CertificateFile
from kubelet.util.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

# How long one request waits to be approved and issued before a new one is made.
CERTIFICATE_WAIT_TIMEOUT = 15 * 60.0


def jittery_deadline(not_before: float, not_after: float, rand: float) -> float:
    """When to renew: 70% of the lifetime plus up to another 20% (`rand` in [0, 1))."""
    total = not_after - not_before
    return not_before + total * (0.7 + 0.2 * rand)


class NodeNameMismatch(ValueError):
    """A certificate names another node than this kubelet's."""


def check_subject(pair: KeyPair, template: Template) -> None:
    """Refuse a certificate issued for another identity than the one requested."""
    if pair.common_name != template.common_name:
        raise NodeNameMismatch(
            f"certificate {pair.path} was issued for {pair.common_name!r}, "
            f"but this kubelet is {template.common_name!r}"
        )


class Manager:
    """One certificate kind (client or serving) of this kubelet.

    `client_fn` gives the API client to request a certificate with, from the
    pair then current (None when there is none or it expired)."""

    def __init__(
        self,
        name: str,
        store: FileStore,
        get_template: Callable[[], Template | None],
        signer: str,
        auth_usage: str,
        client_fn: Callable[[KeyPair | None], CSRClient | None],
        *,
        dynamic_template: bool = False,
        clock: Clock = REAL_CLOCK,
        rand: Callable[[], float] = random.random,
        renew_errors: Counter | None = None,
        rotation_age: Histogram | None = None,
        wait_timeout: float = CERTIFICATE_WAIT_TIMEOUT,
    ) -> None:
        self.name = name
        self.store = store
        self.get_template = get_template
        self.signer = signer
        self.auth_usage = auth_usage
        self.client_fn = client_fn
        self.dynamic_template = dynamic_template
        self.clock = clock
        self.rand = rand
        self.renew_errors = renew_errors
        self.rotation_age = rotation_age
        self.wait_timeout = wait_timeout
        # Whether the API server answered the last request the way a working one
        # does (upstream's serverHealth): decides whether an expired client
        # certificate is worth a restart.
        self.server_healthy = False
        self._pair: KeyPair | None = None
        self._file: CertificateFile | None = None
        try:
            self._set(store.current())
        except NoCertKeyError:
            pass

    def _set(self, pair: KeyPair) -> KeyPair | None:
        old = self._pair
        self._pair = pair
        self._file = CertificateFile(pair.path, pair.not_after, pair.leaf.serial_number)
        return old

    # CertificateSource
    def current_certificate(self) -> CertificateFile | None:
        f = self._file
        if f is None or self.clock.time() > f.not_after:
            return None
        return f

    def current(self) -> KeyPair | None:
        """The pair in use; None when there is none or it has expired."""
        p = self._pair
        if p is None or self.clock.time() > p.not_after:
            return None
        return p

    def satisfies_template(self) -> bool:
        """Whether the pair has everything the template asks for (extra names are fine)."""
        p = self._pair
        if p is None:
            return False
        t = self.get_template()
        if t is None:
            return True
        if p.common_name != t.common_name:
            log.info(
                "%s: current certificate CN (%s) does not match requested CN (%s)",
                self.name,
                p.common_name,
                t.common_name,
            )
            return False
        missing = (
            set(t.dns_names) - set(p.dns_names()),
            set(t.ip_addresses) - set(p.ip_addresses()),
            set(t.organizations) - set(p.organizations),
        )
        for what, names in zip(("DNS names", "IP addresses", "orgs"), missing, strict=True):
            if names:
                log.info(
                    "%s: current certificate is missing requested %s %s",
                    self.name,
                    what,
                    sorted(names),
                )
                return False
        return True

    def next_rotation_deadline(self) -> float:
        p = self._pair
        if p is None or not self.satisfies_template():
            return self.clock.time()
        return jittery_deadline(p.not_before, p.not_after, self.rand())

    async def rotate(self) -> bool:
        """One attempt: request, wait, store. False (logged, counted) when it failed."""
        log.info("%s: Rotating certificates", self.name)
        try:
            await self._rotate()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # one failed attempt: the rotation loop tries again later
            log.error("%s: certificate rotation failed: %s", self.name, err)
            if self.renew_errors is not None:
                self.renew_errors.inc()
            self.server_healthy = _answered(err, self.server_healthy)
            return False
        self.server_healthy = True
        return True

    async def _rotate(self) -> None:
        template = self.get_template()
        if template is None:
            raise CSRError("unable to create a csr, no template available")
        key = generate_key()
        csr_pem = make_csr(key, template)
        client = self.client_fn(self.current())
        if client is None:
            raise CSRError("no client to request certificates with")
        name, uid = await request_certificate(
            client, csr_pem, "", self.signer, usages_for(key, self.auth_usage), key
        )
        log.info("%s: waiting for certificate signing request %s", self.name, name)
        try:
            async with asyncio.timeout(self.wait_timeout):
                cert_pem = await wait_for_certificate(client, name, uid)
        except TimeoutError:
            raise CSRError(
                f"certificate request {name} was not signed within {self.wait_timeout:.0f}s"
            ) from None
        kp = key_pem(key)
        check_subject(parse_pair(cert_pem, kp, f"csr {name}"), template)
        loop = asyncio.get_running_loop()
        pair = await loop.run_in_executor(None, self.store.update, cert_pem, kp)
        old = self._set(pair)
        if old is not None and self.rotation_age is not None:
            self.rotation_age.observe(self.clock.time() - old.not_before)
        log.info(
            "%s: new certificate from %s installed, valid until %s",
            self.name,
            name,
            pair.leaf.not_valid_after_utc.isoformat(),
        )

    async def run(self, stop: asyncio.Event) -> None:
        log.info("%s: Certificate rotation is enabled", self.name)
        while not stop.is_set():
            deadline = self.next_rotation_deadline()
            wait = deadline - self.clock.time()
            if wait > 0:
                log.info(
                    "%s: certificate expires at %.0f, rotation deadline is %.0f; waiting %.0fs",
                    self.name,
                    self._pair.not_after if self._pair else 0,
                    deadline,
                    wait,
                )
            # A dynamic template (the serving addresses) is rechecked every second.
            while wait > 0 and not stop.is_set():
                await _wait_any(stop, None, min(wait, 1.0) if self.dynamic_template else wait)
                if self.dynamic_template and not self.satisfies_template():
                    log.info("%s: certificate template changed, rotating", self.name)
                    break
                wait = deadline - self.clock.time()
            if stop.is_set():
                return
            if self.get_template() is None:
                await _wait_any(stop, None, 1.0)
                continue
            delay, attempts = 2.0, 0
            while not stop.is_set() and not await self.rotate():
                attempts += 1
                if attempts == 5:
                    log.error("%s: reached backoff limit, still unable to rotate certs", self.name)
                await _wait_any(stop, None, delay * (1 + 0.1 * self.rand()))
                delay = delay * 2 if attempts < 5 else 32.0


def _answered(err: Exception, before: bool) -> bool:
    """Whether an error says the API server works (upstream: it refused us, or
    the object is missing) or not (an outage, or a 5xx from a proxy); other
    failures (a request denied, not issued in time) tell nothing new."""
    import aiohttp

    from kubelet.client.rest import APIError

    if isinstance(err, APIError):
        return err.status in (401, 403, 404)
    if isinstance(err, aiohttp.ClientError | OSError | TimeoutError):
        return False
    return before


async def _wait_any(stop: asyncio.Event, other: asyncio.Event | None, timeout: float) -> None:
    waits = [asyncio.ensure_future(stop.wait())]
    if other is not None:
        waits.append(asyncio.ensure_future(other.wait()))
    try:
        await asyncio.wait(waits, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
