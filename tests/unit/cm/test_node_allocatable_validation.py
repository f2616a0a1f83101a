"""enforceNodeAllocatable and systemCgroups validation, as upstream checks them
(every problem at once)."""

from __future__ import annotations

from kubelet.apis.config import KubeletConfiguration
from kubelet.apis.config.validation import validate_kubelet_configuration


def problems(**fields: object) -> list[str]:
    c = KubeletConfiguration()
    for k, v in fields.items():
        setattr(c, k, v)
    return validate_kubelet_configuration(c)


def test_valid_enforcements() -> None:
    assert problems() == []  # ["pods"]
    assert problems(enforce_node_allocatable=["none"]) == []
    assert problems(enforce_node_allocatable=[], cgroups_per_qos=False) == []
    assert (
        problems(
            enforce_node_allocatable=["pods", "system-reserved", "kube-reserved-compressible"],
            system_reserved_cgroup="/system.slice",
            kube_reserved_cgroup="/kube.slice",
        )
        == []
    )


def test_every_enforcement_problem_is_listed() -> None:
    errs = problems(
        enforce_node_allocatable=[
            "pods", "pods", "system-reserved", "system-reserved-compressible",
            "kube-reserved", "bogus", "none",
        ],
        cgroups_per_qos=False,
        system_cgroups="/system",
        cgroup_root="",
    )  # fmt: skip
    text = "\n".join(errs)
    for needle in (
        'both "system-reserved" and "system-reserved-compressible" cannot be specified together',
        'duplicated enforcement "pods"',
        'option "bogus" is not one of',
        'may not contain additional enforcements when "none" is specified',
        'systemReservedCgroup must be specified when "system-reserved" is included',
        'systemReservedCgroup must be specified when "system-reserved-compressible" is included',
        'kubeReservedCgroup must be specified when "kube-reserved" is included',
        'cgroupsPerQOS must be set to true when "pods" is included',
        "systemCgroups ('/system'): was specified and cgroupRoot was not specified",
    ):
        assert needle in text, needle
    assert len(errs) == 12  # cgroupsPerQOS once per known key but "none"
