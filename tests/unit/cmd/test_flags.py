"""Every flag of the upstream kubelet parses; deprecated ones say so as pflag
does; bad input is reported whole; /configz serves the configuration in force."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.apis.config import upstream
from kubelet.apis.config.v1beta1 import document
from kubelet.cmd.flags_table import flags
from kubelet.cmd.kubelet import UsageError, build_server

SAMPLES = {
    "bool": "true",
    "string": "x",
    "int": "3",
    "int32": "3",
    "int64": "3",
    "Level": "2",
    "duration": "90s",
    "ip": "127.0.0.1",
    "quantity": "1Mi",
    "stringSlice": "a,b",
    "mapStringString": "a=b",
    "colonSeparatedMultimapStringString": "a:b",
    "[]v1.Taint": "k=v:NoSchedule",
    "reserved-memory": "0:memory=1Gi",
    "pattern=N,...": "foo=2",
}
# Values a sample would make invalid, or that stop the command.
SPECIAL = {
    "feature-gates": "KubeletPSI=true",
    "eviction-hard": "memory.available<1Gi",
    "eviction-soft": "memory.available<2Gi",
    "eviction-soft-grace-period": "memory.available=1m",
    "node-labels": "a=b",
    "kube-reserved": "cpu=1",
    "system-reserved": "cpu=1",
    "help": None,
    "version": None,
}


def test_every_upstream_flag_parses() -> None:
    table = flags()
    for name, u in upstream.flags().items():
        if name in SPECIAL and SPECIAL[name] is None:
            continue
        value = SPECIAL.get(name) or SAMPLES[u.type]
        fl = table[name]
        assert fl.parse(value) is not None, name


def test_deprecated_flags_print_upstreams_message() -> None:
    s, warnings, _ = build_server(["--max-pods=30", "--maximum-dead-containers=5", "--v=3"])
    assert s is not None and s.config.max_pods == 30 and s.config.logging.verbosity == 3
    assert (
        "Flag --max-pods has been deprecated, This parameter should be set via the config file "
        "specified by the Kubelet's --config flag. See "
        "https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more "
        "information."
    ) in warnings
    assert any(w.startswith("Flag --maximum-dead-containers has been deprecated") for w in warnings)
    assert not any(w.startswith("Flag --v ") for w in warnings)  # -v is not deprecated
    assert s.flags.other["maximum-dead-containers"] == "5"


def test_the_node_e2e_harness_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    # a fully defaulted file, as the harness writes it
    import yaml

    from kubelet.apis.config import loader

    doc = loader.set_defaults({}, from_file=True)
    cfg.write_text(
        yaml.safe_dump(
            {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **doc}
        )
    )
    (tmp_path / "conf.d").mkdir()
    s, warnings, _ = build_server(
        [
            f"--kubeconfig={tmp_path}/kubeconfig", f"--root-dir={tmp_path}/root", "--v", "4",
            f"--config-dir={tmp_path}/conf.d", "--container-runtime-endpoint=unix:///run/x.sock",
            f"--config={cfg}", "--runtime-cgroups=/system.slice/containerd.service",
        ]
    )  # fmt: skip
    assert s is not None and s.config.logging.verbosity == 4
    assert s.config.container_runtime_endpoint == "unix:///run/x.sock"
    assert s.flags.runtime_cgroups == "/system.slice/containerd.service"
    # a fully defaulted file names nothing; the flag and the default-on gates do
    assert [w.split(":")[0].split(",")[0] for w in warnings] == [
        "Flag --container-runtime-endpoint has been deprecated",
        "flag --runtime-cgroups=/system.slice/containerd.service is not supported by this "
        "kubelet yet",
        "feature gates enabled by default that this kubelet does not implement yet (see "
        "docs/configuration.md)",
    ]


def test_seccomp_default_flag_or_field(tmp_path: Path) -> None:
    s, _, _ = build_server(["--seccomp-default"])
    assert s is not None and s.config.seccomp_default and s.flags.seccomp_default
    s, _, _ = build_server([])
    assert s is not None and not s.config.seccomp_default


def test_bad_input_is_reported_whole(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "maxPods: lots\nsyncFrequency: 5 minutes\nnoSuchField: 1\nauthentication: {webhook: {cacheTTL: 3}}\n"
        "imageGCHighThresholdPercent: 60\nimageGCLowThresholdPercent: 70\ncpuManagerPolicy: 7\n"
    )
    with pytest.raises(UsageError) as err:
        build_server(
            [
                "--config",
                str(cfg),
                "--port=x",
                "--no-such-flag",
                "--feature-gates=Nope=true",
                "--cgroup-driver=upstart",
            ]
        )
    text = "\n".join(err.value.problems)
    for needle in (
        "maxPods: want an integer",
        "syncFrequency",
        'unknown field "noSuchField"',
        "authentication.webhook.cacheTTL",
        "imageGCLowThresholdPercent",
        "cpuManagerPolicy: want a string",
        'invalid argument "x" for "--port" flag',
        "unknown flag: --no-such-flag",
        "unrecognized feature gate: Nope",
        "cgroupDriver ('upstart')",
    ):
        assert needle in text, (needle, text)


def test_configz_serves_every_field_in_force(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "maxPods: 50\ncpuManagerPolicy: static\nsyncFrequency: 0s\n"
    )
    s, _, _ = build_server(["--config", str(cfg), "--max-pods=70"])
    assert s is not None
    served = document(s.config, s.document)
    assert set(upstream.fields()) <= _leaves(served) | {
        p for p in upstream.fields() if upstream.fields()[p].default is None
    }
    assert served["maxPods"] == 70  # the flag, not the file
    assert served["syncFrequency"] == "1m0s"  # the default, not the file's zero
    assert served["cpuManagerPolicy"] == "static"
    s.config.max_pods = 80  # what the running kubelet holds is what is served
    assert document(s.config, s.document)["maxPods"] == 80


def _leaves(doc: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in doc.items():
        if isinstance(v, dict) and f"{prefix}{k}" not in ("featureGates", "evictionHard"):
            out |= _leaves(v, f"{prefix}{k}.") | {f"{prefix}{k}"}
        else:
            out.add(f"{prefix}{k}")
    return out
