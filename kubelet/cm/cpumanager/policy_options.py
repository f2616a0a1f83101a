"""The static policy's options (pkg/kubelet/cm/cpumanager/policy_options.go).

In v1.34 full-pcpus-only is GA; strict-cpu-reservation,
distribute-cpus-across-numa and prefer-align-cpus-by-uncorecache are beta
(CPUManagerPolicyBetaOptions, on by default); align-by-socket and
distribute-cpus-across-cores are alpha (CPUManagerPolicyAlphaOptions, off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubelet.cm.cpumanager.topology import CPUTopology
from kubelet.cm.topologymanager.policy import POLICY_SINGLE_NUMA_NODE, parse_bool
from kubelet.features import Feature, FeatureGate

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"

ALPHA_OPTIONS = frozenset({ALIGN_BY_SOCKET, DISTRIBUTE_CPUS_ACROSS_CORES})
BETA_OPTIONS = frozenset(
    {STRICT_CPU_RESERVATION, DISTRIBUTE_CPUS_ACROSS_NUMA, PREFER_ALIGN_BY_UNCORECACHE}
)
STABLE_OPTIONS = frozenset({FULL_PCPUS_ONLY})

_FIELD = {
    FULL_PCPUS_ONLY: "full_pcpus_only",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "distribute_across_numa",
    ALIGN_BY_SOCKET: "align_by_socket",
    DISTRIBUTE_CPUS_ACROSS_CORES: "distribute_across_cores",
    STRICT_CPU_RESERVATION: "strict_cpu_reservation",
    PREFER_ALIGN_BY_UNCORECACHE: "prefer_align_by_uncore_cache",
}
_EXCLUSIVE = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)


@dataclass(frozen=True)
class StaticPolicyOptions:
    full_pcpus_only: bool = False
    distribute_across_numa: bool = False
    align_by_socket: bool = False
    distribute_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_by_uncore_cache: bool = False


def check_option_available(name: str, gates: FeatureGate) -> None:
    if name not in ALPHA_OPTIONS | BETA_OPTIONS | STABLE_OPTIONS:
        raise ValueError(f'unknown CPU Manager Policy option: "{name}"')
    if name in ALPHA_OPTIONS and not gates.enabled(Feature.CPUManagerPolicyAlphaOptions):
        raise ValueError(
            f'CPU Manager Policy Alpha-level Options not enabled, but option "{name}" provided'
        )
    if name in BETA_OPTIONS and not gates.enabled(Feature.CPUManagerPolicyBetaOptions):
        raise ValueError(
            f'CPU Manager Policy Beta-level Options not enabled, but option "{name}" provided'
        )


def new_static_policy_options(
    options: Mapping[str, str], gates: FeatureGate
) -> StaticPolicyOptions:
    """NewStaticPolicyOptions: ValueError with upstream's message (options in name order)."""
    values: dict[str, bool] = {}
    for name in sorted(options):
        check_option_available(name, gates)
        try:
            values[_FIELD[name]] = parse_bool(options[name])
        except ValueError as err:
            raise ValueError(f'bad value for option "{name}": {err}') from None
    opts = StaticPolicyOptions(**values)
    for a, b in _EXCLUSIVE:
        if getattr(opts, _FIELD[a]) and getattr(opts, _FIELD[b]):
            raise ValueError(f"static policy options {a} and {b} can not be used at the same time")
    return opts


def validate_static_policy_options(
    opts: StaticPolicyOptions, topo: CPUTopology, topology_policy: str
) -> None:
    """ValidateStaticPolicyOptions: options the machine or the topology policy rule out."""
    if not opts.align_by_socket:
        return
    if topology_policy == POLICY_SINGLE_NUMA_NODE:
        raise ValueError(
            f"Topolgy manager {POLICY_SINGLE_NUMA_NODE} policy is incompatible with "
            f"CPUManager {ALIGN_BY_SOCKET} policy option"
        )
    if topo.num_sockets > topo.num_numa_nodes:
        raise ValueError(
            "Align by socket is not compatible with hardware where number of sockets are "
            "more than number of NUMA"
        )
