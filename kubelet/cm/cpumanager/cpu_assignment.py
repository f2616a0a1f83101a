"""Choosing which CPUs a container gets (pkg/kubelet/cm/cpumanager/cpu_assignment.go).

take_by_topology_numa_packed: whole NUMA nodes and sockets first (whichever
is the bigger unit first), then whole uncore caches (prefer-align-cpus-by-
uncorecache), then whole cores (unless distribute-cpus-across-cores), then
single threads, each time from the unit with the fewest free CPUs (ties: lowest
ID), so allocations pack and leave big units whole.

take_by_topology_numa_distributed (distribute-cpus-across-numa): the smallest
set of NUMA nodes over which the request spreads evenly (in groups of a core's
threads with full-pcpus-only), choosing the set that leaves the free CPUs most
balanced, then packs within each node.

This is a faithful port, including two behaviours of the Go code that are
not obvious from its comments: the packed sort lists a socket once per NUMA
node it spans (so cores and CPUs can appear twice), and the NUMA combinations
handed to the distributed search share Go's append backing arrays, so a
remembered "best" combination of 4, 6, 7 or 8+ nodes can be rewritten by the
combinations tried after it (GoSlice reproduces that). One deviation: where
the Go code would loop forever handing out remainder CPUs that no NUMA node of
the subset can take any more (odd free counts with full-pcpus-only), this port
gives up on that subset (or fails the allocation) instead of hanging.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kubelet.cm.cpumanager.topology import CPUDetails, CPUTopology
from kubelet.cm.topologymanager.topology_manager import AdmissionError
from kubelet.util.cpuset import EMPTY, CPUSet

PACKED = "packed"
SPREAD = "spread"


class AllocationError(AdmissionError):
    """Not enough CPUs: the pod's UnexpectedAdmissionError, as upstream."""


def _round3(x: float) -> float:
    # math.Round: half away from zero (Python's round() is half to even).
    v = x * 1000
    return math.floor(v + 0.5) / 1000 if v >= 0 else -math.floor(-v + 0.5) / 1000


def mean(xs: list[int]) -> float:
    total = 0.0
    for x in xs:
        total += float(x)
    return _round3(total / float(len(xs)))


def standard_deviation(xs: list[int]) -> float:
    m = mean(xs)
    total = 0.0
    for x in xs:
        total += (float(x) - m) * (float(x) - m)
    return _round3(math.sqrt(total / float(len(xs))))


class GoSlice:
    """A Go []int: appending writes into the shared backing array while it has room."""

    __slots__ = ("arr", "n")

    def __init__(self, arr: list[int], n: int) -> None:
        self.arr = arr
        self.n = n

    def append(self, x: int) -> GoSlice:
        if self.n < len(self.arr):
            self.arr[self.n] = x
            return GoSlice(self.arr, self.n + 1)
        cap = max(1, 2 * len(self.arr))  # growslice for small []int: 1, 2, 4, 8, ...
        arr = self.arr[: self.n] + [x] + [0] * (cap - self.n - 1)
        return GoSlice(arr, self.n + 1)

    def items(self) -> list[int]:
        return self.arr[: self.n]

    def __len__(self) -> int:
        return self.n


def iterate_combinations(n: list[int], k: int, f: Callable[[GoSlice], bool]) -> None:
    """Every k-subset of n in lexicographic order; f answers True to stop."""
    if k < 1:
        return

    def helper(k: int, start: int, accum: GoSlice) -> bool:
        if k == 0:
            return f(accum)
        for i in range(start, len(n) - k + 1):
            if helper(k - 1, i + 1, accum.append(n[i])):
                return True
        return False

    helper(k, 0, GoSlice([], 0))


class CPUAccumulator:
    def __init__(self, topo: CPUTopology, available: CPUSet, num_cpus: int, sorting: str) -> None:
        self.topo = topo
        self.details: CPUDetails = topo.details.keep_only(available)
        self.needed = num_cpus
        self.result: CPUSet = EMPTY
        self.numa_first = topo.num_sockets >= topo.num_numa_nodes
        self.spread = sorting == SPREAD

    # ------------------------------------------------------------ sorting
    def _sort(self, ids: list[int], cpus_in: Callable[..., CPUSet]) -> list[int]:
        """By free CPUs ascending, then ID."""
        return sorted(ids, key=lambda i: (len(cpus_in(i)), i))

    def _nested(
        self, outer: list[int], members: Callable[[int], CPUSet], cpus_in: Callable[..., CPUSet]
    ) -> list[int]:
        """Each outer unit's members, sorted within it; outer order kept."""
        out: list[int] = []
        for o in outer:
            out += self._sort(list(members(o)), cpus_in)
        return out

    def sort_numa_nodes(self) -> list[int]:
        d = self.details
        if self.numa_first:
            return self._sort(list(d.numa_nodes()), d.cpus_in_numa_nodes)
        return self._nested(self.sort_sockets(), d.numa_nodes_in_sockets, d.cpus_in_numa_nodes)

    def sort_sockets(self) -> list[int]:
        d = self.details
        if not self.numa_first:
            return self._sort(list(d.sockets()), d.cpus_in_sockets)
        return self._nested(self.sort_numa_nodes(), d.sockets_in_numa_nodes, d.cpus_in_sockets)

    def sort_cores(self) -> list[int]:
        d = self.details
        if self.numa_first:
            return self._nested(self.sort_sockets(), d.cores_in_sockets, d.cpus_in_cores)
        return self._nested(self.sort_numa_nodes(), d.cores_in_numa_nodes, d.cpus_in_cores)

    def sort_uncore_caches(self) -> list[int]:
        d = self.details
        return self._nested(self.sort_numa_nodes(), d.uncore_in_numa_nodes, d.cpus_in_uncore_caches)

    def sort_cpus(self) -> list[int]:
        d = self.details
        out: list[int] = []
        if self.spread:
            for socket in self.sort_sockets():
                out += sorted(d.cpus_in_sockets(socket))
        else:
            for core in self.sort_cores():
                out += sorted(d.cpus_in_cores(core))
        return out

    # -------------------------------------------------------------- taking
    def take(self, cpus: CPUSet) -> None:
        self.result = self.result | cpus
        self.details = self.details.keep_only(self.details.cpus() - self.result)
        self.needed -= len(cpus)

    def needs_at_least(self, n: int) -> bool:
        return self.needed >= n

    def is_satisfied(self) -> bool:
        return self.needed < 1

    def is_failed(self) -> bool:
        return self.needed > len(self.details)

    def _take_whole(
        self,
        ids: list[int],
        cpus_in: Callable[[CPUDetails, int], CPUSet],
        size: Callable[[int], int],
    ) -> None:
        """Take each unit whose CPUs are all free (`size` of them) while the
        request still needs at least a whole unit; the free ones are listed first."""
        free = [i for i in ids if len(cpus_in(self.details, i)) == size(i)]
        for i in free:
            cpus = cpus_in(self.topo.details, i)
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

    def _topo_size(self, cpus_in: Callable[[CPUDetails, int], CPUSet]) -> Callable[[int], int]:
        return lambda i: len(cpus_in(self.topo.details, i))

    def take_full_numa_nodes(self) -> None:
        f = CPUDetails.cpus_in_numa_nodes
        self._take_whole(self.sort_numa_nodes(), f, self._topo_size(f))

    def take_full_sockets(self) -> None:
        per = self.topo.cpus_per_socket()
        self._take_whole(self.sort_sockets(), CPUDetails.cpus_in_sockets, lambda _: per)

    def take_full_first_level(self) -> None:
        if self.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_full_second_level(self) -> None:
        if self.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    def take_full_uncore(self) -> None:
        f = CPUDetails.cpus_in_uncore_caches
        self._take_whole(self.sort_uncore_caches(), f, self._topo_size(f))

    def take_partial_uncore(self, uncore: int) -> None:
        per_core = self.topo.cpus_per_core()
        cores_needed = (self.needed + per_core - 1) // per_core
        cores = self.details.cores_needed_in_uncore_cache(cores_needed, uncore)
        free = self.details.cpus_in_cores(*cores)
        if self.needed % 2 != 0 and per_core > 1:
            # An odd request on SMT: leave the last thread of the last core.
            ordered = sorted(free)
            if len(ordered) > self.needed:
                ordered = ordered[: len(free) - 1]
            free = frozenset(ordered)
        if self.needed == len(free):
            self.take(free)

    def take_uncore_cache(self) -> None:
        per_uncore = self.topo.cpus_per_uncore()
        for uncore in self.sort_uncore_caches():
            if self.needs_at_least(per_uncore):
                self.take_full_uncore()
            if self.is_satisfied():
                return
            self.take_partial_uncore(uncore)
            if self.is_satisfied():
                return

    def take_full_cores(self) -> None:
        per = self.topo.cpus_per_core()
        self._take_whole(self.sort_cores(), CPUDetails.cpus_in_cores, lambda _: per)

    def take_remaining_cpus(self) -> None:
        for cpu in self.sort_cpus():
            self.take(frozenset((cpu,)))
            if self.is_satisfied():
                return

    def range_numa_nodes_needed(self, group: int) -> tuple[int, int]:
        """Fewest and most NUMA nodes the request can span in groups of `group` CPUs."""
        num_numa = len(self.topo.details.numa_nodes())
        available_numa = len(self.details.numa_nodes())
        groups = (len(self.topo.details) - 1) // group + 1
        groups_per_numa = (groups - 1) // num_numa + 1
        groups_needed = (self.needed - 1) // group + 1
        return (groups_needed - 1) // groups_per_numa + 1, min(groups_needed, available_numa)


def _accumulator(
    topo: CPUTopology, available: CPUSet, num_cpus: int, sorting: str
) -> CPUAccumulator:
    """A new accumulator; AllocationError when the request cannot fit at all."""
    acc = CPUAccumulator(topo, available, num_cpus, sorting)
    if not acc.is_satisfied() and acc.is_failed():
        raise AllocationError(
            f"not enough cpus available to satisfy request: requested={num_cpus}, "
            f"available={len(available)}"
        )
    return acc


def take_by_topology_numa_packed(
    topo: CPUTopology, available: CPUSet, num_cpus: int, sorting: str, prefer_uncore: bool
) -> CPUSet:
    acc = _accumulator(topo, available, num_cpus, sorting)
    if acc.is_satisfied():
        return acc.result
    steps: list[Callable[[], None]] = [acc.take_full_first_level, acc.take_full_second_level]
    if prefer_uncore:
        steps.append(acc.take_uncore_cache)
    if sorting != SPREAD:
        steps.append(acc.take_full_cores)
    steps.append(acc.take_remaining_cpus)
    for step in steps:
        step()
        if acc.is_satisfied():
            return acc.result
    raise AllocationError("failed to allocate cpus")


def _balance(after: dict[int, int], keys: list[int]) -> float:
    return standard_deviation([after[k] for k in keys])


class _Best:
    """The best combination so far; `combo` and `remainder` are live Go slices."""

    def __init__(self) -> None:
        self.balance = math.inf
        self.combo: GoSlice | None = None
        self.remainder: GoSlice | None = None


def _remainder_balance(
    combo: list[int], after: dict[int, int], remainder: int, group: int
) -> tuple[float, GoSlice | None]:
    """The best balance over subsets of `combo` that can take the remainder CPUs."""
    numas = list(after)
    cand = [numa for numa in combo if after[numa] >= group]
    if remainder == 0:
        return _balance(after, numas), None
    best, best_subset = math.inf, None
    for k in range(len(cand), 0, -1):

        def visit(subset: GoSlice) -> bool:
            nonlocal best, best_subset
            left, local = remainder, dict(after)
            members = subset.items()
            if sum(local[m] for m in members) < left:
                return False
            while left > 0:
                before = left
                for numa in members:
                    if left == 0:
                        break
                    if local[numa] < group:
                        continue
                    local[numa] -= group
                    left -= group
                if left == before:
                    return False  # upstream loops forever here
            balance = _balance(local, numas)
            if balance < best:
                best, best_subset = balance, subset
            return False

        iterate_combinations(cand, k, visit)
    return best, best_subset


def _packed_or_empty(acc: CPUAccumulator, numa: int, n: int, sorting: str) -> CPUSet:
    """A packed take within one NUMA node; the Go code drops the error (empty set)."""
    try:
        return take_by_topology_numa_packed(
            acc.topo, acc.details.cpus_in_numa_nodes(numa), n, sorting, False
        )
    except AllocationError:
        return EMPTY


def _best_combination(
    acc: CPUAccumulator, numas: list[int], k: int, num_cpus: int, group: int
) -> _Best:
    """The k NUMA nodes over which the request spreads leaving the most balanced free CPUs."""
    best = _Best()
    d = acc.details

    def visit(combo_slice: GoSlice) -> bool:
        if best.balance == 0:
            return True
        combo = combo_slice.items()
        if len(d.cpus_in_numa_nodes(*combo)) < num_cpus:
            return False
        if sum(len(d.cpus_in_numa_nodes(n)) // group for n in combo) * group < num_cpus:
            return False
        share = (num_cpus // len(combo) // group) * group
        if any(len(d.cpus_in_numa_nodes(n)) < share for n in combo):
            return False
        after = {n: len(d.cpus_in_numa_nodes(n)) for n in numas}
        for n in combo:
            after[n] -= share
        remainder = num_cpus - share * len(combo)
        balance, subset = _remainder_balance(combo, after, remainder, group)
        if balance < best.balance:
            best.balance, best.remainder, best.combo = balance, subset, combo_slice
        return False

    iterate_combinations(numas, k, visit)
    return best


def take_by_topology_numa_distributed(
    topo: CPUTopology, available: CPUSet, num_cpus: int, group: int, sorting: str
) -> CPUSet:
    if num_cpus % group != 0:
        return take_by_topology_numa_packed(topo, available, num_cpus, sorting, False)
    acc = _accumulator(topo, available, num_cpus, sorting)
    if acc.is_satisfied():
        return acc.result
    numas = acc.sort_numa_nodes()
    lo, hi = acc.range_numa_nodes_needed(group)
    for k in range(lo, hi + 1):
        best = _best_combination(acc, numas, k, num_cpus, group)
        if best.combo is None:
            continue
        combo = best.combo.items()
        share = (num_cpus // len(combo) // group) * group
        for numa in combo:
            acc.take(_packed_or_empty(acc, numa, share, sorting))
        remainder = num_cpus - share * len(combo)
        rest = best.remainder.items() if best.remainder is not None else []
        while remainder > 0:
            before = remainder
            for numa in rest:
                if remainder == 0:
                    break
                if len(acc.details.cpus_in_numa_nodes(numa)) < group:
                    continue
                acc.take(_packed_or_empty(acc, numa, group, sorting))
                remainder -= group
            if remainder == before:
                break  # upstream loops forever; the accounting check below fails it
        if acc.needed > 0:
            raise AllocationError(
                f"accounting error, not enough CPUs allocated, remaining: {acc.needed}"
            )
        if acc.needed < 0:
            raise AllocationError(
                f"accounting error, too many CPUs allocated, remaining: {acc.needed}"
            )
        return acc.result
    return take_by_topology_numa_packed(topo, available, num_cpus, sorting, False)
