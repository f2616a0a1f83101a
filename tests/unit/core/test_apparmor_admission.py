"""AppArmor admission (node e2e 'AppArmor when running without AppArmor should
reject a pod with an AppArmor profile in annotation / in field'): a pending pod
asking for a profile is refused with reason AppArmor on a host without it."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from kubelet.lifecycle.apparmor import Validator, host_error, is_required
from kubelet.types import Pod


def _pod(annotations: dict | None = None, sc: dict | None = None, phase: str = "Pending") -> Pod:
    c: dict = {"name": "test", "image": "busybox"}
    if sc is not None:
        c["securityContext"] = sc
    doc = {
        "metadata": {"name": "p", "uid": "u", "annotations": annotations or {}},
        "spec": {"containers": [c]},
        "status": {"phase": phase},
    }
    return cast(Pod, doc)


RUNTIME_DEFAULT_FIELD = {"appArmorProfile": {"type": "RuntimeDefault"}}
RUNTIME_DEFAULT_ANNOTATION = {
    "container.apparmor.security.beta.kubernetes.io/test": "runtime/default"
}


@pytest.mark.parametrize(
    "pod",
    [_pod(sc=RUNTIME_DEFAULT_FIELD), _pod(annotations=RUNTIME_DEFAULT_ANNOTATION)],
    ids=["field", "annotation"],
)
def test_a_pod_asking_for_apparmor_is_refused_on_a_host_without_it(pod: Pod) -> None:
    r = Validator("AppArmor is not enabled on the host").admit(pod)
    assert r is not None
    assert r.reason == "AppArmor"
    assert r.message == "Cannot enforce AppArmor: AppArmor is not enabled on the host"
    assert Validator(None).admit(pod) is None


def test_unconfined_or_no_profile_or_a_running_pod_is_admitted_anyway() -> None:
    v = Validator("AppArmor is not enabled on the host")
    assert v.admit(_pod()) is None
    assert v.admit(_pod(sc={"appArmorProfile": {"type": "Unconfined"}})) is None
    unconfined = {"container.apparmor.security.beta.kubernetes.io/test": "unconfined"}
    assert v.admit(_pod(annotations=unconfined)) is None
    assert not is_required(_pod(annotations={"other": "runtime/default"}))
    assert v.admit(_pod(sc=RUNTIME_DEFAULT_FIELD, phase="Running")) is None


def test_an_empty_localhost_profile_is_refused_where_apparmor_works() -> None:
    pod = _pod(sc={"appArmorProfile": {"type": "Localhost", "localhostProfile": " "}})
    r = Validator(None).admit(pod)
    assert r is not None and r.reason == "AppArmor"
    assert "invalid empty AppArmor profile name" in r.message


def test_host_error_reads_the_kernel_module_state(tmp_path: Path) -> None:
    assert host_error(tmp_path) == "AppArmor is not enabled on the host"
    (tmp_path / "kernel/security/apparmor").mkdir(parents=True)
    params = tmp_path / "module/apparmor/parameters"
    params.mkdir(parents=True)
    (params / "enabled").write_text("N\n")
    assert host_error(tmp_path) == "AppArmor is not enabled on the host"
    (params / "enabled").write_text("Y\n")
    assert host_error(tmp_path) is None
