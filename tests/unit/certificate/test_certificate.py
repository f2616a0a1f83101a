"""The certificate package's pure parts with a CA of the test's own: rotation
deadlines on a fake clock, the on-disk layout, key reuse across restarts, the
node-name check, and a rotation swapping into an API client and a TLS server."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import ssl
import stat
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet.certificate import bootstrap
from kubelet.certificate.csr import KUBELET_SERVING_SIGNER, Template, generate_key, key_pem
from kubelet.certificate.kubelet import (
    addresses_to_hostnames_and_ips,
    client_template,
    serving_template_fn,
)
from kubelet.certificate.manager import Manager, NodeNameMismatch, check_subject, jittery_deadline
from kubelet.certificate.store import FileStore, NoCertKeyError, load_pair_file, parse_pair
from kubelet.client.kubeconfig import ConnectionConfig
from kubelet.client.rest import APIClient
from kubelet.server.tls import RotatingServerContext
from kubelet.testing.net import free_port
from kubelet.testing.net import serving as serving_app
from kubelet.testing.pki import PKI
from kubelet.util.clock import FakeClock


class Signer:
    """A CSR API of the test's own: stores requests, signs approved ones with
    the test CA for `lifetime` seconds starting at the fake clock's time."""

    def __init__(self, pki: PKI, clock: FakeClock, lifetime: float, cn_override: str = "") -> None:
        self.pki, self.clock, self.lifetime = pki, clock, lifetime
        self.cn_override = cn_override
        self.csrs: dict[str, dict[str, Any]] = {}
        self.deny = 0  # how many of the next requests to deny

    async def create(self, path: str, obj: Any, **kw: Any) -> Any:
        name = obj["metadata"].get("name") or f"csr-{len(self.csrs)}"
        if name in self.csrs:
            from kubelet.client.rest import APIError

            raise APIError(409, "AlreadyExists", f"{name} exists")
        obj = dict(obj, metadata={"name": name, "uid": f"uid-{name}"})
        self.csrs[name] = obj
        return obj

    async def get(self, path: str, **kw: Any) -> Any:
        if "params" in kw:
            name = kw["params"]["fieldSelector"].split("=", 1)[1]
            self._sign(name)
            return {"metadata": {"resourceVersion": "1"}, "items": [self.csrs[name]]}
        return self.csrs[path.rsplit("/", 1)[1]]

    def watch(self, path: str, params: dict[str, str], timeout: float | None = None) -> Any:
        async def none() -> Any:
            if False:
                yield "", {}

        return none()

    def _sign(self, name: str) -> None:
        obj = self.csrs[name]
        if obj.get("status"):
            return
        if self.deny:
            self.deny -= 1
            obj["status"] = {"conditions": [{"type": "Denied", "reason": "Test", "message": "no"}]}
            return
        req = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
        subject = req.subject
        if self.cn_override:
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.cn_override)])
        start = datetime.datetime.fromtimestamp(self.clock.time(), datetime.UTC)
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.pki.ca_name)
            .public_key(req.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(seconds=self.lifetime))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        try:
            san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            b = b.add_extension(san, critical=False)
        except x509.ExtensionNotFound:
            pass
        cert = b.sign(self.pki.ca_key, hashes.SHA256())
        pem = cert.public_bytes(serialization.Encoding.PEM)
        obj["status"] = {
            "conditions": [{"type": "Approved"}],
            "certificate": base64.b64encode(pem).decode(),
        }


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    return PKI(str(tmp_path / "ca"))


def client_manager(tmp_path: Path, signer: Signer, clock: FakeClock, **kw: Any) -> Manager:
    """The client certificate's manager for node n1, signed by `signer`."""
    return Manager(
        "client",
        FileStore("kubelet-client", str(tmp_path / "pki")),
        lambda: client_template("n1"),
        "kubernetes.io/kube-apiserver-client-kubelet",
        "client auth",
        lambda current: signer,
        clock=clock,
        **kw,
    )


def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime() -> None:
    assert jittery_deadline(1000, 2000, 0.0) == 1700
    assert jittery_deadline(1000, 2000, 0.5) == 1800
    assert jittery_deadline(1000, 2000, 0.999999) == pytest.approx(1900, abs=0.01)


async def test_manager_rotates_at_its_deadline_and_installs_a_new_pair(
    pki: PKI, tmp_path: Path
) -> None:
    clock = FakeClock(start=1_800_000_000.0)
    signer = Signer(pki, clock, lifetime=1000)
    rand = iter([0.5, 0.0, 0.25, 0.75])
    m = client_manager(tmp_path, signer, clock, rand=lambda: next(rand))
    assert m.current() is None and m.current_certificate() is None
    assert m.next_rotation_deadline() == clock.time()  # nothing yet: now
    assert await m.rotate()
    first = m.current_certificate()
    assert first is not None and first.not_after == clock.time() + 1000
    assert m.next_rotation_deadline() == clock.time() + 800  # 70% + 0.5 * 20%
    assert m.next_rotation_deadline() == clock.time() + 700
    clock.step(750)
    assert await m.rotate()
    second = m.current_certificate()
    assert second is not None and second != first and second.not_after == clock.time() + 1000
    # The old pair stays on disk; the symlink moved.
    assert os.path.realpath(tmp_path / "pki" / "kubelet-client-current.pem") == second.path
    clock.step(2000)  # everything expired
    assert m.current() is None and m.current_certificate() is None
    csr = next(iter(signer.csrs.values()))
    assert csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert csr["spec"]["usages"] == ["digital signature", "client auth"]
    assert csr["metadata"]["name"] == "csr-0"


async def test_a_certificate_for_another_node_is_rejected(pki: PKI, tmp_path: Path) -> None:
    clock = FakeClock(start=1_800_000_000.0)
    signer = Signer(pki, clock, 1000, cn_override="system:node:someone-else")
    m = client_manager(tmp_path, signer, clock)
    assert not await m.rotate()
    assert m.current() is None
    assert not (tmp_path / "pki" / "kubelet-client-current.pem").exists()
    key = generate_key()
    with pytest.raises(NodeNameMismatch, match="someone-else"):
        signer.cn_override = "system:node:someone-else"
        pem = _sign_for(pki, key, "system:node:someone-else")
        check_subject(parse_pair(pem, key_pem(key), "x"), client_template("n1"))


def _sign_for(pki: PKI, key: ec.EllipticCurvePrivateKey, cn: str) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(pki.ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(pki.ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_file_store_layout_modes_and_symlink(pki: PKI, tmp_path: Path) -> None:
    d = tmp_path / "pki"
    store = FileStore("kubelet-server", str(d))
    with pytest.raises(NoCertKeyError):
        store.current()
    key = generate_key()
    pair = store.update(_sign_for(pki, key, "system:node:n1"), key_pem(key), now=1_800_000_000)
    name = datetime.datetime.fromtimestamp(1_800_000_000).strftime("%Y-%m-%d-%H-%M-%S")
    assert Path(pair.path).name == f"kubelet-server-{name}.pem"
    assert stat.S_IMODE(os.stat(pair.path).st_mode) == 0o600
    current = d / "kubelet-server-current.pem"
    assert current.is_symlink() and os.readlink(current) == str(Path(pair.path).resolve())
    text = Path(pair.path).read_bytes()
    assert text.index(b"BEGIN CERTIFICATE") < text.index(b"BEGIN EC PRIVATE KEY")
    assert store.current().leaf == pair.leaf
    # A crash between making "-updated" and the rename: the next start recovers it.
    os.rename(current, d / "kubelet-server-updated.pem")
    assert FileStore("kubelet-server", str(d)).current().leaf == pair.leaf
    assert current.is_symlink()


def test_pending_key_is_kept_across_restarts_and_names_the_request(tmp_path: Path) -> None:
    path = str(tmp_path / bootstrap.TMP_PRIVATE_KEY_FILE)
    first = bootstrap.load_or_generate_key_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert bootstrap.load_or_generate_key_file(path) == first
    k1 = serialization.load_pem_private_key(first, None)
    k2 = generate_key()
    t = client_template("n1")
    usages = ["digital signature", "client auth"]
    assert isinstance(k1, ec.EllipticCurvePrivateKey)
    n1 = bootstrap.digested_name(k1, t, usages)
    assert n1.startswith("node-csr-") and n1 == bootstrap.digested_name(k1, t, usages)
    assert n1 != bootstrap.digested_name(k2, t, usages)
    assert n1 != bootstrap.digested_name(k1, client_template("n2"), usages)


async def test_bootstrap_reuses_its_pending_request_then_writes_kubeconfig(
    pki: PKI, tmp_path: Path
) -> None:
    clock = FakeClock(start=datetime.datetime.now().timestamp() - 60)
    signer = Signer(pki, clock, 3600)
    boot = tmp_path / "bootstrap.kubeconfig"
    boot.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        f"    server: https://127.0.0.1:1\n    certificate-authority: {pki.ca.cert}\n"
        "users:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n"
        "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    pki_dir = tmp_path / "pki"
    kubeconfig = tmp_path / "kubelet.kubeconfig"
    # An earlier run made the key and the request, then died before issuance.
    pki_dir.mkdir()
    key_data = bootstrap.load_or_generate_key_file(str(pki_dir / bootstrap.TMP_PRIVATE_KEY_FILE))
    key = serialization.load_pem_private_key(key_data, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    usages = ["digital signature", "client auth"]
    name = bootstrap.digested_name(key, client_template("n1"), usages)
    await signer.create("", {"metadata": {"name": name}, "spec": {
        "request": base64.b64encode(
            __import__("kubelet.certificate.csr", fromlist=["make_csr"]).make_csr(
                key, client_template("n1")
            )
        ).decode(),
        "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
        "usages": usages,
    }})  # fmt: skip
    await bootstrap.load_client_cert(
        str(kubeconfig), str(boot), str(pki_dir), "n1", client=signer, server_wait=0
    )
    assert list(signer.csrs) == [name]  # no second request
    assert not (pki_dir / bootstrap.TMP_PRIVATE_KEY_FILE).exists()
    current = pki_dir / "kubelet-client-current.pem"
    issued = load_pair_file(str(current))
    pub = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert issued.key.public_key().public_bytes(*pub) == key.public_key().public_bytes(*pub)
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert bootstrap.client_config_still_valid(str(kubeconfig))
    # The next start finds a valid kubeconfig and does nothing.
    await bootstrap.load_client_cert(
        str(kubeconfig), str(boot), str(pki_dir), "n1", client=signer, server_wait=0
    )
    assert list(signer.csrs) == [name]
    # The same files for another node name: refused with a clear error.
    with pytest.raises(bootstrap.BootstrapError, match=r"system:node:n1.*system:node:n2"):
        await bootstrap.load_client_cert(
            str(kubeconfig), str(boot), str(pki_dir), "n2", client=signer, server_wait=0
        )


def test_unusable_cert_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(bootstrap.BootstrapError, match="cannot use --cert-dir"):
        bootstrap.check_cert_dir(str(blocker / "pki"))


def test_serving_template_from_node_addresses() -> None:
    addrs = [
        {"type": "InternalIP", "address": "10.0.0.2"},
        {"type": "ExternalIP", "address": "1.2.3.4"},
        {"type": "Hostname", "address": "node-a"},
        {"type": "InternalDNS", "address": "node-a.internal"},
        {"type": "InternalIP", "address": "10.0.0.2"},
    ]
    assert addresses_to_hostnames_and_ips(addrs) == (
        ("node-a", "node-a.internal"),
        ("1.2.3.4", "10.0.0.2"),
    )
    t = serving_template_fn("node-a", lambda: addrs)()
    assert t == Template(
        "system:node:node-a",
        ("system:nodes",),
        ("node-a", "node-a.internal"),
        ("1.2.3.4", "10.0.0.2"),
    )
    # No IP yet: no request, as upstream.
    assert serving_template_fn("node-a", lambda: [{"type": "Hostname", "address": "a"}])() is None


async def test_rotation_reaches_new_api_and_server_connections(pki: PKI, tmp_path: Path) -> None:
    """A real TLS server requiring client certificates, an APIClient reading its
    pair from a client manager, the server's pair from a serving manager: after
    both rotate, new connections present and see the new certificates."""
    clock = FakeClock(start=datetime.datetime.now().timestamp() - 60)
    signer = Signer(pki, clock, 3600)
    addrs = [{"type": "InternalIP", "address": "127.0.0.1"}]
    serving = Manager(
        "serving",
        FileStore("kubelet-server", str(tmp_path / "pki")),
        serving_template_fn("n1", lambda: addrs),
        KUBELET_SERVING_SIGNER,
        "server auth",
        lambda current: signer,
        clock=clock,
    )
    client = client_manager(tmp_path, signer, clock)
    seen: list[str] = []

    async def whoami(req: web.Request) -> web.Response:
        peer = req.transport.get_extra_info("ssl_object").getpeercert(binary_form=True)  # type: ignore[union-attr]
        seen.append(x509.load_der_x509_certificate(peer).serial_number.__str__())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    ctx = RotatingServerContext(serving, pki.ca.cert).context
    ctx.verify_mode = ssl.CERT_REQUIRED
    async with serving_app(app, ssl_context=ctx) as port:
        api = APIClient(
            ConnectionConfig(f"https://127.0.0.1:{port}", ca_file=pki.ca.cert),
            0,
            1,
            cert_source=client,
        )
        try:
            # No serving pair yet: handshakes fail.
            with pytest.raises(aiohttp.ClientError):
                await api.get("/whoami")
            assert await serving.rotate() and await client.rotate()
            await api.get("/whoami")
            c1 = client.current()
            assert c1 is not None and seen[-1] == str(c1.leaf.serial_number)
            old_session = api.session
            assert await serving.rotate() and await client.rotate()
            await api.get("/whoami")
            c2 = client.current()
            assert c2 is not None and c2.leaf.serial_number != c1.leaf.serial_number
            assert seen[-1] == str(c2.leaf.serial_number)
            assert api.session is not old_session and not old_session.closed  # retired, not cut
        finally:
            await api.close()
    await asyncio.sleep(0)


def _bootstrap_kubeconfig(tmp_path: Path, pki: PKI, server: str) -> Path:
    boot = tmp_path / "bootstrap.kubeconfig"
    boot.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        f"    server: {server}\n    certificate-authority: {pki.ca.cert}\n"
        "users:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n"
        "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
    )
    return boot


async def test_a_denied_bootstrap_request_is_logged_and_retried_with_a_new_key(
    pki: PKI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(start=datetime.datetime.now().timestamp() - 60)
    signer = Signer(pki, clock, 3600)
    signer.deny = 1
    boot = _bootstrap_kubeconfig(tmp_path, pki, "https://127.0.0.1:1")
    kubeconfig = tmp_path / "kubelet.kubeconfig"
    await bootstrap.load_client_cert(
        str(kubeconfig), str(boot), str(tmp_path / "pki"), "n1", client=signer, server_wait=0
    )
    names = list(signer.csrs)
    assert len(names) == 2 and names[0] != names[1]  # a new key gives a new request
    assert "Denied" in str(signer.csrs[names[0]]["status"])
    assert "is denied, reason: Test" in caplog.text and "retrying with a new key" in caplog.text
    assert bootstrap.client_config_still_valid(str(kubeconfig))


async def test_an_unreachable_api_server_is_retried_and_the_key_kept(
    pki: PKI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()  # nothing listens there
    boot = _bootstrap_kubeconfig(tmp_path, pki, f"https://127.0.0.1:{port}")
    pki_dir = tmp_path / "pki"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3.5):
            await bootstrap.load_client_cert(
                str(tmp_path / "kubelet.kubeconfig"), str(boot), str(pki_dir), "n1", server_wait=0
            )
    assert caplog.text.count("Unable to request a client certificate") >= 2
    assert "retrying in" in caplog.text
    key = (pki_dir / bootstrap.TMP_PRIVATE_KEY_FILE).read_bytes()
    assert bootstrap.load_or_generate_key_file(str(pki_dir / bootstrap.TMP_PRIVATE_KEY_FILE)) == key
    assert not (tmp_path / "kubelet.kubeconfig").exists()


async def test_kubelet_exits_when_its_client_certificate_expired_and_the_server_answers(
    pki: PKI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kubelet.cmd.run import exit_on_expired_client_certificate

    clock = FakeClock(start=datetime.datetime.now().timestamp())
    signer = Signer(pki, clock, 600)
    m = client_manager(tmp_path, signer, clock)
    assert await m.rotate() and m.server_healthy
    stop, failed = asyncio.Event(), asyncio.Event()
    watcher = asyncio.create_task(
        exit_on_expired_client_certificate(m, stop, failed, exit_after=300, period=0.01)
    )
    clock.step(590)  # still valid
    await asyncio.sleep(0.05)
    clock.step(200)  # expired ~190 s ago: not yet
    await asyncio.sleep(0.05)
    assert not stop.is_set()
    m.server_healthy = False  # an outage: complain, keep running
    clock.step(200)
    await asyncio.sleep(0.05)
    assert not stop.is_set() and "server is not responsive" in caplog.text
    m.server_healthy = True
    await asyncio.wait_for(watcher, 1)
    assert stop.is_set() and failed.is_set()
    assert "expired and the server is responsive, exiting" in caplog.text
