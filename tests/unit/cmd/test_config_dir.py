"""--config-dir drop-ins with upstream's semantics (mergeKubeletConfigurations):
every *.conf file in the tree, in lexical order, merged as a JSON merge patch
over the --config file; then defaults; then the flags, which win."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.cmd.kubelet import UsageError, build_server

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def _write(path: Path, body: str, head: str = HEAD) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + body)
    return str(path)


def test_dropins_merge_in_lexical_order_and_flags_win(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path / "config.yaml",
        "maxPods: 50\nclusterDNS: [10.0.0.1, 10.0.0.2]\nfeatureGates: {KubeletPSI: false}\n"
        "evictionHard: {memory.available: 200Mi}\nport: 10260\n",
    )
    d = tmp_path / "conf.d"
    _write(d / "20-b.conf", "maxPods: 70\nclusterDNS: [10.0.0.9]\n")
    _write(d / "10-a.conf", "maxPods: 60\nfeatureGates: {EventedPLEG: true}\nport: null\n")
    _write(d / "30-sub" / "05-c.conf", "evictionHard: {nodefs.available: 5%}\n")
    _write(d / "99-ignored.yaml", "maxPods: 999\n")  # not *.conf
    s, _, _ = build_server(
        [
            "--config",
            cfg,
            "--config-dir",
            str(d),
            "--kube-api-qps=7",
            "--feature-gates=KubeletPSI=true",
        ]
    )
    assert s is not None
    c = s.config
    assert c.max_pods == 70  # 20-b after 10-a; 30-sub/05-c after both, by path
    assert c.cluster_dns == ["10.0.0.9"]  # lists replace
    assert c.feature_gates == {"KubeletPSI": True, "EventedPLEG": True}  # maps merge, flag wins
    assert c.eviction_hard == {"memory.available": "200Mi", "nodefs.available": "5%"}
    assert c.port == 10250  # null removes the file's value; the default comes back
    assert c.kube_api_qps == 7
    # /configz serves what is in force
    assert s.document["maxPods"] == 70 and s.document["kubeAPIQPS"] == 7


def test_dropins_without_a_config_file(tmp_path: Path) -> None:
    d = tmp_path / "conf.d"
    _write(d / "a.conf", "maxPods: 33\nhairpinMode: hairpin-veth\n")
    s, warnings, _ = build_server(["--config-dir", str(d)])
    assert s is not None and s.config.max_pods == 33
    assert s.document["hairpinMode"] == "hairpin-veth"
    assert any(w.startswith("config field hairpinMode='hairpin-veth'") for w in warnings)


def test_bad_dropins_are_all_reported(tmp_path: Path) -> None:
    d = tmp_path / "conf.d"
    _write(d / "a.conf", "maxPods: lots\n")
    _write(d / "b.conf", "noSuchField: 1\n")
    _write(d / "c.conf", "maxPods: 3\n", head="")  # no apiVersion/kind
    (d / "d.conf").write_text("")
    with pytest.raises(UsageError) as err:
        build_server(["--config-dir", str(d), "--config-dir-typo=1"])
    text = "\n".join(err.value.problems)
    assert "a.conf: maxPods: want an integer" in text
    assert 'b.conf: noSuchField: unknown field "noSuchField"' in text
    assert "c.conf: apiVersion/kind" in text
    assert "d.conf' was empty" in text
    assert "unknown flag: --config-dir-typo" in text


def test_merge_default_eviction_settings(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path / "c.yaml",
        "mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 1Gi}\n",
    )
    s, _, _ = build_server(["--config", cfg])
    assert s is not None
    assert s.config.eviction_hard["memory.available"] == "1Gi"
    assert s.config.eviction_hard["nodefs.available"] == "10%"
    cfg = _write(tmp_path / "d.yaml", "evictionHard: {memory.available: 1Gi}\n")
    s, _, _ = build_server(["--config", cfg])
    assert s is not None and s.config.eviction_hard == {"memory.available": "1Gi"}


def test_relative_paths_in_the_config_file_are_resolved_against_it(tmp_path: Path) -> None:
    cfg = _write(tmp_path / "etc" / "c.yaml", "staticPodPath: manifests\ntlsCertFile: /abs/c.crt\n")
    s, _, _ = build_server(["--config", cfg])
    assert s is not None
    assert s.config.static_pod_path == str(tmp_path / "etc" / "manifests")
    assert s.config.tls_cert_file == "/abs/c.crt"
