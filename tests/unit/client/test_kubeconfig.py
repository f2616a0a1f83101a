"""Reading a kubeconfig: the current context's server, CA and credentials as
client-go takes them, and a clear refusal for what would change whom the
kubelet acts as."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet.client import kubeconfig as kc
from kubelet.client.kubeconfig import KubeconfigError, load_kubeconfig


def write(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], **top: Any) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}, {"name": "other", "cluster": {}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
        **top,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_files_are_relative_to_the_kubeconfig_and_data_stays_in_memory(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        {"server": "https://10.0.0.1:6443/", "certificate-authority": "pki/ca.crt"},
        {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
    )
    conn = load_kubeconfig(path)
    assert conn.host == "https://10.0.0.1:6443"
    assert conn.ca_file == str(tmp_path / "pki/ca.crt")
    assert conn.verify and conn.token is None
    assert conn.cert_file and Path(conn.cert_file).read_text() == "CERT"
    assert conn.key_file and Path(conn.key_file).read_text() == "KEY"
    # A key from the kubeconfig is never written to a disk, not even /tmp.
    assert os.readlink(conn.key_file).startswith("/memfd:kubeconfig-")
    assert stat.S_IMODE(os.stat(conn.key_file).st_mode) == 0o600


def test_absolute_paths_inline_ca_and_insecure(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "server": "https://h",
            "certificate-authority-data": b64("CA"),
            "insecure-skip-tls-verify": True,
        },
        {"client-certificate": "/etc/k/c.pem", "client-key": "/etc/k/k.pem"},
    )
    conn = load_kubeconfig(path)
    assert conn.ca_file and Path(conn.ca_file).read_text() == "CA"
    assert not conn.verify
    assert (conn.cert_file, conn.key_file) == ("/etc/k/c.pem", "/etc/k/k.pem")


def test_token_token_file_and_basic_auth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"token": "abc"}))
    assert conn.token is not None and conn.token() == "Bearer abc"

    (tmp_path / "tok").write_text("first\n")
    conn = load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"tokenFile": "tok"}))
    assert conn.token is not None and conn.token() == "Bearer first"
    (tmp_path / "tok").write_text("second\n")
    assert conn.token() == "Bearer first"  # read again only after a while
    clock = [1e9]
    monkeypatch.setattr(kc.time, "monotonic", lambda: clock[0])
    assert conn.token() == "Bearer second"
    (tmp_path / "tok").unlink()
    clock[0] += kc.TOKEN_FILE_TTL
    assert conn.token() == "Bearer second"  # a vanished file keeps the last token

    conn = load_kubeconfig(
        write(tmp_path, {"server": "https://h"}, {"username": "a", "password": "b"})
    )
    assert conn.token is not None and conn.token() == "Basic " + b64("a:b")


def plugin(tmp_path: Path, status: dict[str, Any], version: str = kc.EXEC_VERSIONS[0]) -> str:
    """A credential plugin that answers `status` and records each run's input."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write(os.environ['KUBERNETES_EXEC_INFO'] + '\\n')\n"
        f"print(json.dumps({{'apiVersion': {version!r}, 'kind': 'ExecCredential', "
        f"'status': {status!r}}}))\n"
    )
    return str(script)


def test_exec_plugin_token_is_refreshed_when_it_expires(tmp_path: Path) -> None:
    script = plugin(tmp_path, {"token": "t1", "expirationTimestamp": "2000-01-01T00:00:00Z"})
    exec_spec = {
        "apiVersion": kc.EXEC_VERSIONS[0],
        "command": sys.executable,
        "args": [script],
        "env": [{"name": "X", "value": "1"}],
        "provideClusterInfo": True,
        "interactiveMode": "Never",
    }
    (tmp_path / "ca.pem").write_text("PEM-CA")
    cluster = {
        "server": "https://h",
        "certificate-authority": "ca.pem",
        "extensions": [{"name": kc.EXEC_EXTENSION, "extension": {"audience": "a"}}],
    }
    conn = load_kubeconfig(write(tmp_path, cluster, {"exec": exec_spec}))
    assert conn.token is not None and conn.token() == "Bearer t1"
    runs = (tmp_path / "runs").read_text().splitlines()
    assert len(runs) == 2  # at load, and again: the token had expired
    info = json.loads(runs[0])
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://h"
    assert info["spec"]["cluster"]["config"] == {"audience": "a"}
    assert info["spec"]["cluster"]["certificate-authority-data"] == b64("PEM-CA")


def test_exec_token_is_renewed_ahead_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near its expiry the request goes on with the old token and the plugin
    runs on a thread; the loop never waits for it while a token is valid."""
    script = tmp_path / "slow.py"
    script.write_text(
        "import json, os, time\n"
        f"runs = {str(tmp_path / 'runs')!r}\n"
        "n = len(open(runs).read()) if os.path.exists(runs) else 0\n"
        "open(runs, 'a').write('x')\n"
        "time.sleep(0.5 if n else 0)\n"
        f"print(json.dumps({{'apiVersion': {kc.EXEC_VERSIONS[0]!r}, 'kind': 'ExecCredential',"
        " 'status': {'token': 't%d' % (n + 1), 'expirationTimestamp': '2100-01-01T00:00:00Z'}}))\n"
    )
    spec = {
        "apiVersion": kc.EXEC_VERSIONS[0],
        "command": sys.executable,
        "args": [str(script)],
        "interactiveMode": "Never",
    }
    conn = load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": spec}))
    assert conn.token is not None and conn.token() == "Bearer t1"
    expiry = kc._expiry("2100-01-01T00:00:00Z")
    assert expiry is not None
    monkeypatch.setattr(kc.time, "time", lambda: expiry - 30)  # inside the renewal window
    started = time.monotonic()
    assert conn.token() == "Bearer t1" and conn.token() == "Bearer t1"
    assert time.monotonic() - started < 0.3  # the 0.5 s plugin run did not hold the caller
    deadline = time.monotonic() + 10
    while conn.token() != "Bearer t2" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert conn.token() == "Bearer t2"
    assert (tmp_path / "runs").read_text() == "xx"  # one renewal, not one per request


def test_exec_plugin_client_certificate(tmp_path: Path) -> None:
    script = plugin(tmp_path, {"clientCertificateData": "PEM-C", "clientKeyData": "PEM-K"})
    spec = {"apiVersion": kc.EXEC_VERSIONS[1], "command": sys.executable, "args": [script]}
    with pytest.raises(KubeconfigError, match="ExecCredential"):
        load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": spec}))
    cert = {"clientCertificateData": "PEM-C", "clientKeyData": "PEM-K"}
    script = plugin(tmp_path, cert, kc.EXEC_VERSIONS[1])
    conn = load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": spec}))
    assert conn.token is None
    assert conn.cert_file and Path(conn.cert_file).read_text() == "PEM-C"
    assert conn.key_file and Path(conn.key_file).read_text() == "PEM-K"


@pytest.mark.parametrize(
    ("cluster", "user", "top", "message"),
    [
        ({"server": "https://h"}, {"as": "admin"}, {}, "not supported: as"),
        ({"server": "https://h"}, {"auth-provider": {"name": "gcp"}}, {}, "auth-provider"),
        ({"server": "https://h"}, {}, {"current-context": ""}, "no current-context"),
        ({"server": "https://h"}, {}, {"current-context": "nope"}, "context 'nope' not found"),
        ({}, {}, {}, "has no server"),
        ({"server": "https://h"}, {"client-certificate": "c.pem"}, {}, "needs its key"),
        ({"server": "https://h"}, {"client-key-data": "!!"}, {}, "not base64"),
        ({"server": "https://h"}, {"tokenFile": "missing"}, {}, "tokenFile"),
        ({"server": "https://h"}, {"exec": {"apiVersion": "x/v0", "command": "c"}}, {}, "x/v0"),
        (
            {"server": "https://h"},
            {
                "exec": {
                    "apiVersion": kc.EXEC_VERSIONS[0],
                    "command": "/nonexistent/p",
                    "installHint": "install it",
                    "interactiveMode": "IfAvailable",
                }
            },
            {},
            "install it",
        ),
    ],
)
def test_unusable_kubeconfigs_are_refused_with_the_reason(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], top: dict[str, Any], message: str
) -> None:
    path = write(tmp_path, cluster, user, **top)
    with pytest.raises(KubeconfigError, match=message) as err:
        load_kubeconfig(path)
    assert path in str(err.value)


def test_fields_not_implemented_are_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    load_kubeconfig(write(tmp_path, {"server": "https://h", "tls-server-name": "x"}, {}))
    assert "cluster.tls-server-name is not implemented" in caplog.text


def test_every_field_not_read_gets_a_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger=kc.__name__)
    cluster = {
        "server": "https://h",
        "disable-compression": True,
        "extensions": [{"name": "other", "extension": {}}],
        "sever": "typo",
    }
    user = {"token": "t", "extensions": [{"name": "x", "extension": {}}], "tokenfile": "typo"}
    path = write(tmp_path, cluster, user, preferences={"colors": True})
    doc = yaml.safe_load(Path(path).read_text())
    doc["contexts"][0]["context"]["namespace"] = "kube-system"
    Path(path).write_text(yaml.safe_dump(doc))
    load_kubeconfig(path)
    lines = {(r.levelname, r.getMessage()) for r in caplog.records}
    assert lines == {
        ("WARNING", "kubeconfig: unknown field cluster.sever; ignored"),
        ("WARNING", "kubeconfig: unknown field user.tokenfile; ignored"),
        ("INFO", "kubeconfig: preferences has no effect on a kubelet; not read"),
        ("INFO", "kubeconfig: cluster.extensions has no effect on a kubelet; not read"),
        ("INFO", "kubeconfig: context.namespace has no effect on a kubelet; not read"),
        ("INFO", "kubeconfig: user.extensions has no effect on a kubelet; not read"),
    }


@pytest.mark.parametrize(
    ("version", "mode", "tty", "outcome"),
    [
        (kc.EXEC_VERSIONS[0], None, False, "must be specified"),
        (kc.EXEC_VERSIONS[0], "Sometimes", False, "must be one of"),
        (kc.EXEC_VERSIONS[0], "Always", False, "not a terminal"),
        (kc.EXEC_VERSIONS[0], "Always", True, True),
        (kc.EXEC_VERSIONS[0], "Never", True, False),
        (kc.EXEC_VERSIONS[0], "IfAvailable", False, False),
        (kc.EXEC_VERSIONS[1], None, True, True),  # v1beta1 defaults to IfAvailable
    ],
)
def test_exec_interactive_mode_as_client_go(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    mode: str | None,
    tty: bool,
    outcome: str | bool,
) -> None:
    monkeypatch.setattr(kc.os, "isatty", lambda fd: tty)
    script = plugin(tmp_path, {"token": "t"}, version)
    spec = {"apiVersion": version, "command": sys.executable, "args": [script]}
    if mode is not None:
        spec["interactiveMode"] = mode
    path = write(tmp_path, {"server": "https://h"}, {"exec": spec})
    if isinstance(outcome, str):
        with pytest.raises(KubeconfigError, match=outcome):
            load_kubeconfig(path)
        return
    load_kubeconfig(path)
    info = json.loads((tmp_path / "runs").read_text().splitlines()[0])
    assert info["spec"]["interactive"] is outcome


def test_a_plugin_not_interactive_reads_no_stdin(tmp_path: Path) -> None:
    script = tmp_path / "stdin.py"
    script.write_text(
        "import json, sys\n"
        "data = sys.stdin.read()\n"
        f"print(json.dumps({{'apiVersion': {kc.EXEC_VERSIONS[0]!r}, 'kind': 'ExecCredential',"
        " 'status': {'token': 'read:' + data}}))\n"
    )
    spec = {
        "apiVersion": kc.EXEC_VERSIONS[0],
        "command": sys.executable,
        "args": [str(script)],
        "interactiveMode": "Never",
    }
    conn = load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": spec}))
    assert conn.token is not None and conn.token() == "Bearer read:"


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="No such file"):
        load_kubeconfig(str(tmp_path / "absent"))
    (tmp_path / "bad").write_text("- just a list\n")
    with pytest.raises(KubeconfigError, match="not a mapping"):
        load_kubeconfig(str(tmp_path / "bad"))
    # Wrong shapes deeper down are refused the same way, never a crash.
    spec = {"apiVersion": kc.EXEC_VERSIONS[0], "command": "c", "env": [{"value": "x"}]}
    with pytest.raises(KubeconfigError, match="name"):
        load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": spec}))
    with pytest.raises(KubeconfigError, match="invalid kubeconfig"):
        load_kubeconfig(write(tmp_path, {"server": "https://h"}, {"exec": ["not", "a", "map"]}))
