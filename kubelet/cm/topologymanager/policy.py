"""Topology manager policies: merging the hint providers' NUMA hints into one
(pkg/kubelet/cm/topologymanager/policy*.go, numa_info.go, policy_options.go).

Every combination of one hint per resource is merged (the AND of the masks,
preferred only if all agree and are preferred); the best merged hint wins:
preferred over not, then the narrowest mask (or, with prefer-closest-numa-nodes,
the one with the smallest average NUMA distance among equally wide ones).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubelet.cm.topologymanager import bitmask
from kubelet.features import Feature, FeatureGate

log = logging.getLogger(__name__)

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
_ALPHA_OPTIONS: frozenset[str] = frozenset()
_BETA_OPTIONS = frozenset({MAX_ALLOWABLE_NUMA_NODES})
_STABLE_OPTIONS = frozenset({PREFER_CLOSEST_NUMA_NODES})


@dataclass(frozen=True)
class TopologyHint:
    """A NUMA affinity (None: any, Go's nil mask) and whether it is preferred."""

    numa_affinity: int | None
    preferred: bool

    def __str__(self) -> str:
        mask = "<nil>" if self.numa_affinity is None else bitmask.to_string(self.numa_affinity)
        return f"{{{mask} {str(self.preferred).lower()}}}"


# A provider's answer: resource name -> its hints. A missing answer or a None
# list means "no preference"; an empty list means "nothing fits".
ProviderHints = Mapping[str, list[TopologyHint] | None] | None


def parse_bool(value: str) -> bool:
    """strconv.ParseBool."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


@dataclass(frozen=True)
class PolicyOptions:
    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


def check_option_available(name: str, gates: FeatureGate) -> None:
    if name not in _ALPHA_OPTIONS | _BETA_OPTIONS | _STABLE_OPTIONS:
        raise ValueError(f'unknown Topology Manager Policy option: "{name}"')
    if name in _ALPHA_OPTIONS and not gates.enabled(Feature.TopologyManagerPolicyAlphaOptions):
        raise ValueError(
            f'topology manager policy alpha-level options not enabled, but option "{name}" provided'
        )
    if name in _BETA_OPTIONS and not gates.enabled(Feature.TopologyManagerPolicyBetaOptions):
        raise ValueError(
            f'topology manager policy beta-level options not enabled, but option "{name}" provided'
        )


def new_policy_options(options: Mapping[str, str], gates: FeatureGate) -> PolicyOptions:
    """NewPolicyOptions: ValueError naming the first bad option (sorted, for a stable message)."""
    prefer, max_nodes = False, DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    for name in sorted(options):
        value = options[name]
        check_option_available(name, gates)
        if name == PREFER_CLOSEST_NUMA_NODES:
            try:
                prefer = parse_bool(value)
            except ValueError as err:
                raise ValueError(f'bad value for option "{name}": {err}') from None
        else:
            try:
                max_nodes = int(value, 10)
            except ValueError:
                raise ValueError(
                    f'unable to convert policy option to integer "{name}": '
                    f'strconv.Atoi: parsing "{value}": invalid syntax'
                ) from None
            if max_nodes < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise ValueError(
                    f'the minimum value of "{name}" should not be less than '
                    f"{DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                )
            if max_nodes > DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                log.warning(
                    "max-allowable-numa-nodes=%d is more than the recommended %d",
                    max_nodes,
                    DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
                )
    return PolicyOptions(prefer, max_nodes)


@dataclass(frozen=True)
class NUMAInfo:
    """The machine's NUMA node IDs and, for prefer-closest-numa-nodes, their distances."""

    nodes: tuple[int, ...]
    distances: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def default_affinity(self) -> int:
        return bitmask.new_bitmask(self.nodes)

    def narrowest(self, m1: int, m2: int) -> int:
        return m1 if bitmask.is_narrower_than(m1, m2) else m2

    def average_distance(self, mask: int) -> float:
        bits = bitmask.get_bits(mask)
        if not bits:
            return 0.0
        total = sum(float(self.distances[a][b]) for a in bits for b in bits)
        return total / (len(bits) * len(bits))

    def closest(self, m1: int, m2: int) -> int:
        if m1.bit_count() != m2.bit_count():
            return self.narrowest(m1, m2)
        d1, d2 = self.average_distance(m1), self.average_distance(m2)
        if d1 == d2:
            return m1 if m1 < m2 else m2
        return m1 if d1 < d2 else m2


def filter_provider_hints(providers_hints: list[ProviderHints]) -> list[list[TopologyHint]]:
    """One list of hints per resource; "no preference" and "nothing fits" made explicit."""
    out: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            out.append([TopologyHint(None, True)])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                out.append([TopologyHint(None, True)])
            elif not resource_hints:
                out.append([TopologyHint(None, False)])
            else:
                out.append(list(resource_hints))
    return out


def merge_permutation(default_affinity: int, permutation: tuple[TopologyHint, ...]) -> TopologyHint:
    preferred = True
    merged = default_affinity
    first: int | None = None
    for hint in permutation:
        if hint.numa_affinity is not None:
            if first is None:
                first = hint.numa_affinity
            elif hint.numa_affinity != first:
                preferred = False
            merged &= hint.numa_affinity
        if not hint.preferred:
            preferred = False
    return TopologyHint(merged, preferred)


def _narrowest_count(hints: list[TopologyHint]) -> int | None:
    best: int | None = None
    for h in hints:
        if h.numa_affinity is None:
            continue
        if best is None or bitmask.is_narrower_than(h.numa_affinity, best):
            best = h.numa_affinity
    return None if best is None else best.bit_count()


def max_of_min_affinity_counts(hints: list[list[TopologyHint]]) -> int:
    """The widest of the resources' narrowest hints: no merged hint can be narrower."""
    counts = [c for c in (_narrowest_count(h) for h in hints) if c is not None]
    return max(counts, default=0)


class HintMerger:
    def __init__(
        self, numa: NUMAInfo, hints: list[list[TopologyHint]], policy: str, opts: PolicyOptions
    ) -> None:
        self.numa = numa
        self.hints = hints
        self.best_non_preferred_count = max_of_min_affinity_counts(hints)
        self.closest = policy != POLICY_SINGLE_NUMA_NODE and opts.prefer_closest_numa

    def _compare_masks(self, current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        cur, cand = current.numa_affinity, candidate.numa_affinity
        assert cur is not None and cand is not None
        if cand == cur:
            return current
        best = self.numa.closest(cur, cand) if self.closest else self.numa.narrowest(cur, cand)
        return current if best == cur else candidate

    def compare(self, current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        cand_mask = candidate.numa_affinity
        assert cand_mask is not None  # merged hints always carry a mask
        if cand_mask.bit_count() == 0:
            return current
        if current is None:
            return candidate
        if current.preferred != candidate.preferred:
            return current if current.preferred else candidate
        if current.preferred:
            return self._compare_masks(current, candidate)
        # Both non-preferred: aim for the width the resources need at least.
        best = self.best_non_preferred_count
        assert current.numa_affinity is not None
        cur_n, cand_n = current.numa_affinity.bit_count(), cand_mask.bit_count()
        if cur_n > best:
            return self._compare_masks(current, candidate)
        if cur_n == best:
            return current if cand_n != best else self._compare_masks(current, candidate)
        if cand_n > best:
            return current
        if cand_n == best:
            return candidate
        if cand_n != cur_n:
            return candidate if cand_n > cur_n else current
        return self._compare_masks(current, candidate)

    def merge(self) -> TopologyHint:
        default = self.numa.default_affinity()
        best: TopologyHint | None = None
        for permutation in itertools.product(*self.hints):
            best = self.compare(best, merge_permutation(default, permutation))
        return best if best is not None else TopologyHint(default, False)


def filter_single_numa_hints(hints: list[list[TopologyHint]]) -> list[list[TopologyHint]]:
    return [
        [
            h
            for h in resource_hints
            if h.preferred and (h.numa_affinity is None or h.numa_affinity.bit_count() == 1)
        ]
        for resource_hints in hints
    ]


@dataclass(frozen=True)
class Policy:
    """One of the four policies; merge() answers (best hint, admit)."""

    name: str
    numa: NUMAInfo
    opts: PolicyOptions

    def merge(self, providers_hints: list[ProviderHints]) -> tuple[TopologyHint, bool]:
        if self.name == POLICY_NONE:
            return TopologyHint(None, False), True
        filtered = filter_provider_hints(providers_hints)
        if self.name == POLICY_SINGLE_NUMA_NODE:
            filtered = filter_single_numa_hints(filtered)
        best = HintMerger(self.numa, filtered, self.name, self.opts).merge()
        if self.name == POLICY_SINGLE_NUMA_NODE and best.numa_affinity == (
            self.numa.default_affinity()
        ):
            best = TopologyHint(None, best.preferred)
        admit = self.name == POLICY_BEST_EFFORT or best.preferred
        return best, admit

    @property
    def alignment_guaranteed(self) -> bool:
        return self.name == POLICY_SINGLE_NUMA_NODE
