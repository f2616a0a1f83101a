"""Feature gates (the Go kubelet's pkg/features), as far as they concern this kubelet.

Unknown gates are an error, as upstream. Gates upstream has but this project
does not act on are still accepted so a Go kubelet's configuration loads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureSpec:
    default: bool
    stage: str  # ALPHA, BETA, GA, DEPRECATED
    locked: bool = False


# Kubernetes v1.34 defaults for the gates a node agent sees.
KNOWN_FEATURES: dict[str, FeatureSpec] = {
    "EventedPLEG": FeatureSpec(False, "ALPHA"),
    "InPlacePodVerticalScaling": FeatureSpec(True, "BETA"),
    "SidecarContainers": FeatureSpec(True, "GA", locked=True),
    "GracefulNodeShutdown": FeatureSpec(True, "BETA"),
    "GracefulNodeShutdownBasedOnPodPriority": FeatureSpec(True, "BETA"),
    "KubeletTracing": FeatureSpec(True, "BETA"),
    "KubeletPodResourcesGet": FeatureSpec(True, "BETA"),
    "KubeletPodResourcesDynamicResources": FeatureSpec(False, "ALPHA"),
    "KubeletInUserNamespace": FeatureSpec(False, "ALPHA"),
    "KubeletCgroupDriverFromCRI": FeatureSpec(True, "GA"),
    "KubeletSeparateDiskGC": FeatureSpec(True, "BETA"),
    "KubeletFineGrainedAuthz": FeatureSpec(True, "BETA"),
    "KubeletCrashLoopBackOffMax": FeatureSpec(False, "ALPHA"),
    "KubeletServiceAccountTokenForCredentialProviders": FeatureSpec(True, "BETA"),
    "KubeletEnsureSecretPulledImages": FeatureSpec(False, "ALPHA"),
    "PodReadyToStartContainersCondition": FeatureSpec(True, "BETA"),
    "PodLifecycleSleepAction": FeatureSpec(True, "GA"),
    "PodLifecycleSleepActionAllowZero": FeatureSpec(True, "BETA"),
    "ContainerStopSignals": FeatureSpec(False, "ALPHA"),
    "RecursiveReadOnlyMounts": FeatureSpec(True, "GA"),
    "ImageVolume": FeatureSpec(False, "BETA"),
    "MemoryQoS": FeatureSpec(False, "ALPHA"),
    "NodeSwap": FeatureSpec(True, "GA"),
    "CPUManagerPolicyAlphaOptions": FeatureSpec(False, "ALPHA"),
    "CPUManagerPolicyBetaOptions": FeatureSpec(True, "BETA"),
    "MemoryManager": FeatureSpec(True, "BETA"),
    "TopologyManagerPolicyAlphaOptions": FeatureSpec(False, "ALPHA"),
    "TopologyManagerPolicyBetaOptions": FeatureSpec(True, "BETA"),
    "RotateKubeletServerCertificate": FeatureSpec(True, "BETA"),
    "UserNamespacesSupport": FeatureSpec(True, "BETA"),
    "ProcMountType": FeatureSpec(True, "BETA"),
    "SupplementalGroupsPolicy": FeatureSpec(True, "BETA"),
    "ResourceHealthStatus": FeatureSpec(False, "ALPHA"),
    "DynamicResourceAllocation": FeatureSpec(True, "GA"),
    "LocalStorageCapacityIsolationFSQuotaMonitoring": FeatureSpec(False, "BETA"),
    "PodAndContainerStatsFromCRI": FeatureSpec(False, "ALPHA"),
    "ContextualLogging": FeatureSpec(True, "BETA"),
    "LoggingAlphaOptions": FeatureSpec(False, "ALPHA"),
    "LoggingBetaOptions": FeatureSpec(True, "BETA"),
    "ComponentSLIs": FeatureSpec(True, "GA"),
    "SystemdWatchdog": FeatureSpec(True, "BETA"),
    # CSI: the driver's volume condition in /stats/summary; the node's part of
    # volume expansion as the claim's allocatedResourceStatuses say.
    "CSIVolumeHealth": FeatureSpec(False, "ALPHA"),
    "RecoverVolumeExpansionFailure": FeatureSpec(True, "GA", locked=True),
    "AllAlpha": FeatureSpec(False, "ALPHA"),
    "AllBeta": FeatureSpec(False, "BETA"),
}


def parse_gates(text: str) -> dict[str, bool]:
    """Parse the --feature-gates syntax "A=true,B=false" (names are not checked here)."""
    out: dict[str, bool] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        v = value.strip().lower()
        if v not in ("true", "false", "1", "0", "t", "f"):
            raise ValueError(
                f'invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}"'
            )
        out[name.strip()] = v in ("true", "1", "t")
    return out


class FeatureGate:
    """Resolved gate values: defaults, then AllAlpha/AllBeta, then explicit settings."""

    def __init__(self, settings: dict[str, bool] | None = None) -> None:
        self.settings = dict(settings or {})
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        out = []
        for name, value in self.settings.items():
            spec = KNOWN_FEATURES.get(name)
            if spec is None:
                out.append(f"unrecognized feature gate: {name}")
            elif spec.locked and value != spec.default:
                out.append(
                    f"cannot set feature gate {name} to {value}, "
                    f"feature is locked to {spec.default}"
                )
        return out

    def enabled(self, name: str) -> bool:
        spec = KNOWN_FEATURES[name]
        if name in self.settings:
            return self.settings[name]
        if spec.stage == "ALPHA" and self.settings.get("AllAlpha"):
            return True
        if spec.stage == "BETA" and "AllBeta" in self.settings:
            return self.settings["AllBeta"]
        return spec.default

    def known(self) -> list[str]:
        return sorted(KNOWN_FEATURES)


def merge_gates(file_gates: dict[str, bool], flag_gates: dict[str, bool]) -> dict[str, bool]:
    """File gates overlaid per gate by flag gates (the flag wins for each gate it names)."""
    merged = dict(file_gates)
    merged.update(flag_gates)
    return merged
