"""CPU list parsing and printing (k8s.io/utils/cpuset)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubelet.util import cpuset


@pytest.mark.parametrize(
    "text,want",
    [
        ("", set()),
        ("0", {0}),
        ("0-3", {0, 1, 2, 3}),
        ("0-5,34,46-48", {0, 1, 2, 3, 4, 5, 34, 46, 47, 48}),
        ("1-1", {1}),
        ("3,1,2", {1, 2, 3}),
        ("+2", {2}),
    ],
)
def test_parse(text: str, want: set[int]) -> None:
    assert cpuset.parse(text) == want


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", " 1", "1 ", "1_0", "٣"])
def test_parse_refuses_what_go_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        cpuset.parse(text)


def test_parse_refuses_absurd_ranges() -> None:
    with pytest.raises(ValueError, match="more than"):
        cpuset.parse("0-99999999")


def test_format() -> None:
    assert cpuset.format_cpus([]) == ""
    assert cpuset.format_cpus([5, 0, 1, 2]) == "0-2,5"
    assert cpuset.format_cpus({0, 2, 4, 6}) == "0,2,4,6"
    assert cpuset.format_cpus(range(12, 14)) == "12-13"


@given(st.frozensets(st.integers(0, 300)))
def test_round_trip(cpus: frozenset[int]) -> None:
    assert cpuset.parse(cpuset.format_cpus(cpus)) == cpus
