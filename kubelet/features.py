"""Feature gates: the upstream kubelet's registry, and the gates this kubelet reads.

Every gate the v1.34 kubelet binary registers is known here with its
version-aware spec (kubelet/apis/config/data/gates.jsonl, generated from the
Go registry), and setting one follows component-base's featuregate: unknown
names, a locked gate set against its lock and a gate not yet available at
this version are errors; deprecated and GA gates warn when set. Code reads a
gate only through `FeatureGate.enabled(Feature.X)`; `Feature` lists the gates
some part of this kubelet acts on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from kubelet.apis.config import upstream

ALL_ALPHA = "AllAlpha"
ALL_BETA = "AllBeta"


class Feature(enum.StrEnum):
    """The gates this kubelet acts on; each must be an upstream gate."""

    CSIVolumeHealth = "CSIVolumeHealth"
    ContainerCheckpoint = "ContainerCheckpoint"
    CPUManagerPolicyAlphaOptions = "CPUManagerPolicyAlphaOptions"
    CPUManagerPolicyBetaOptions = "CPUManagerPolicyBetaOptions"
    DisableCPUQuotaWithExclusiveCPUs = "DisableCPUQuotaWithExclusiveCPUs"
    # Off: node.status.nodeInfo.kubeProxyVersion names the kubelet's version.
    DisableNodeKubeProxyVersion = "DisableNodeKubeProxyVersion"
    # Pods' ResourceClaims prepared by DRA drivers (cm/dra); off, spec.resourceClaims
    # is named as not implemented on the pod.
    DynamicResourceAllocation = "DynamicResourceAllocation"
    EventedPLEG = "EventedPLEG"
    GracefulNodeShutdown = "GracefulNodeShutdown"
    GracefulNodeShutdownBasedOnPodPriority = "GracefulNodeShutdownBasedOnPodPriority"
    InPlacePodVerticalScaling = "InPlacePodVerticalScaling"
    KubeletFineGrainedAuthz = "KubeletFineGrainedAuthz"
    KubeletInUserNamespace = "KubeletInUserNamespace"
    KubeletPSI = "KubeletPSI"
    KubeletPodResourcesDynamicResources = "KubeletPodResourcesDynamicResources"
    KubeletPodResourcesGet = "KubeletPodResourcesGet"
    KubeletPodResourcesListUseActivePods = "KubeletPodResourcesListUseActivePods"
    KubeletSeparateDiskGC = "KubeletSeparateDiskGC"
    KubeletServiceAccountTokenForCredentialProviders = (
        "KubeletServiceAccountTokenForCredentialProviders"
    )
    # spec.resources (cpu, memory) sets the QoS class, the pod cgroup, admission's
    # fit, eviction ranking and the limits of containers without their own
    # (kubelet/resourcehelper.py); off, a pod that sets it is refused at admission.
    PodLevelResources = "PodLevelResources"
    PodObservedGenerationTracking = "PodObservedGenerationTracking"
    PodReadyToStartContainersCondition = "PodReadyToStartContainersCondition"
    # Static pods naming API objects are refused when decoded (config/static_refs.py).
    PreventStaticPodAPIReferences = "PreventStaticPodAPIReferences"
    # containerStatuses[].allocatedResourcesStatus: the health of device plugin
    # devices (kubelet/cm/devicemanager/health.py) and of DRA claims' devices
    # (kubelet/cm/dra/health.py).
    ResourceHealthStatus = "ResourceHealthStatus"
    # The serving pair from files (tlsCertFile or the self-signed one) is
    # reloaded when it changes on disk (server/tls.py FilePair).
    ReloadKubeletServerCertificateFile = "ReloadKubeletServerCertificateFile"
    RotateKubeletServerCertificate = "RotateKubeletServerCertificate"
    # Node.status.features and containerStatuses[].user from the runtime (the
    # admission check of Strict pods does not depend on it, as upstream).
    SupplementalGroupsPolicy = "SupplementalGroupsPolicy"
    SystemdWatchdog = "SystemdWatchdog"
    TopologyManagerPolicyAlphaOptions = "TopologyManagerPolicyAlphaOptions"
    TopologyManagerPolicyBetaOptions = "TopologyManagerPolicyBetaOptions"
    TopologyManagerPolicyOptions = "TopologyManagerPolicyOptions"
    UserNamespacesSupport = "UserNamespacesSupport"


def parse_gates(text: str) -> dict[str, bool]:
    """Parse the --feature-gates syntax "A=true,B=false" as featuregate.Set does
    (names are checked later, against the registry)."""
    out: dict[str, bool] = {}
    for item in text.split(","):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        v = value.lower()
        if value not in ("1", "t", "T", "TRUE", "true", "True") and value not in (
            "0",
            "f",
            "F",
            "FALSE",
            "false",
            "False",
        ):
            raise ValueError(
                f'invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}": '
                "invalid syntax"
            )
        out[name] = v in ("1", "t", "true")
    return out


def _spec_stage(name: str) -> str:
    return upstream.gates()[name].stage


class FeatureGate:
    """Resolved gate values: the defaults at this version, then AllAlpha/AllBeta,
    then each gate set explicitly. Raises ValueError listing every problem."""

    def __init__(self, settings: Mapping[str, bool] | None = None) -> None:
        self.settings = dict(settings or {})
        problems = gate_problems(self.settings)
        if problems:
            raise ValueError("; ".join(problems))
        self._values = _resolve(self.settings)

    def enabled(self, feature: Feature) -> bool:
        return self._values[feature.value]

    def value(self, name: str) -> bool:
        """A gate's value by its upstream name (the account's checks; code uses enabled())."""
        return self._values[name]

    def explicitly_set(self, name: str) -> bool:
        return name in self.settings

    def enabled_gates(self) -> list[str]:
        return sorted(n for n, v in self._values.items() if v)

    def metric_rows(self) -> list[tuple[str, str, bool]]:
        """(gate, stage, value) for kubernetes_feature_enabled; GA's stage is ""."""
        known = upstream.gates()
        return [(n, "" if known[n].stage == "GA" else known[n].stage, v)
                for n, v in sorted(self._values.items()) if n in known]  # fmt: skip


def _resolve(settings: Mapping[str, bool]) -> dict[str, bool]:
    known = upstream.gates()
    values = {n: g.default for n, g in known.items()}
    for special, stage in ((ALL_ALPHA, "ALPHA"), (ALL_BETA, "BETA")):
        if special in settings:
            for n, g in known.items():
                if g.stage == stage and n not in settings:
                    values[n] = settings[special]
    values.update(settings)
    return values


def gate_problems(settings: Mapping[str, bool]) -> list[str]:
    """Every reason these settings cannot be used, with upstream's messages
    (upstream stops at the first unknown gate; this lists all)."""
    known = upstream.gates()
    out = []
    for name, value in settings.items():
        g = known.get(name)
        if g is None:
            out.append(f"unrecognized feature gate: {name}")
        elif g.locked and value != g.default:
            out.append(
                f"cannot set feature gate {name} to {str(value).lower()}, "
                f"feature is locked to {str(g.default).lower()}"
            )
        elif g.stage == "PRE-ALPHA" and name not in (ALL_ALPHA, ALL_BETA):
            out.append(
                f"cannot set feature gate {name} to {str(value).lower()}, feature is PreAlpha "
                f"at emulated version {kubelet_minor_version()}"
            )
    return out


def gate_set_warnings(settings: Mapping[str, bool]) -> list[str]:
    """The warnings featuregate logs when a deprecated or GA gate is set."""
    known = upstream.gates()
    out = []
    for name, value in sorted(settings.items()):
        g = known.get(name)
        if g is None:
            continue
        v = str(value).lower()
        if g.stage == "DEPRECATED":
            out.append(
                f"Setting deprecated feature gate {name}={v}. It will be removed in a future release."
            )
        elif g.stage == "GA":
            out.append(
                f"Setting GA feature gate {name}={v}. It will be removed in a future release."
            )
    return out


def kubelet_minor_version() -> str:
    major, minor, *_ = upstream.kubernetes_version().lstrip("v").split(".")
    return f"{major}.{minor}"


def merge_gates(file_gates: Mapping[str, bool], flag_gates: Mapping[str, bool]) -> dict[str, bool]:
    """File gates overlaid per gate by flag gates (the flag wins for each gate it names)."""
    merged = dict(file_gates)
    merged.update(flag_gates)
    return merged
