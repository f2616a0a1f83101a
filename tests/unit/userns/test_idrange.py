"""The kubelet's user namespace ID range: where it comes from (the `kubelet`
user, getsubids, /etc/subuid and /etc/subgid) and upstream's checks on it."""

from __future__ import annotations

import pwd
import stat
from pathlib import Path

import pytest

from kubelet.userns import idrange as ir


def _pw(uid: int = 4242) -> pwd.struct_passwd:
    return pwd.struct_passwd(("kubelet", "x", uid, uid, "", "/", "/bin/false"))


def _no_user(name: str) -> pwd.struct_passwd:
    raise KeyError(name)


def files(tmp_path: Path, uid: str | None, gid: str | None) -> dict[str, str]:
    out = {}
    for key, text in (("subuid", uid), ("subgid", gid)):
        p = tmp_path / key
        if text is not None:
            p.write_text(text)
        out[key] = str(p)
    return out


def mappings(tmp_path: Path, uid: str | None, gid: str | None, **kw: object) -> tuple[int, int]:
    return ir.kubelet_mappings(
        getpwnam=kw.pop("getpwnam", lambda _n: _pw()),  # type: ignore[arg-type]
        getsubids="",
        **files(tmp_path, uid, gid),
    )


# ------------------------------------------------------------ the sources
def test_no_kubelet_user_gives_upstreams_default_range(tmp_path: Path) -> None:
    got = mappings(tmp_path, "kubelet:65536:65536\n", "kubelet:65536:65536\n", getpwnam=_no_user)
    assert got == (65536, 2**32 - 65536) == (ir.DEFAULT_FIRST_ID, ir.DEFAULT_LENGTH)


def test_no_subid_files_gives_the_default_range(tmp_path: Path) -> None:
    assert mappings(tmp_path, None, None) == (ir.DEFAULT_FIRST_ID, ir.DEFAULT_LENGTH)


def test_the_kubelet_entries_by_name_or_uid(tmp_path: Path) -> None:
    text = "# comment\nalice:100000:65536\n\nkubelet:131072:6553600\n"
    assert mappings(tmp_path, text, text) == (131072, 6553600)
    by_uid = "alice:100000:65536\n4242:196608:655360\n"
    assert mappings(tmp_path, by_uid, by_uid) == (196608, 655360)
    # another user's broken line is that user's problem, as shadow's tools skip it
    other = "alice:garbage\nkubelet:131072:6553600\n"
    assert mappings(tmp_path, other, other) == (131072, 6553600)


@pytest.mark.parametrize(
    ("uid", "gid", "message"),
    [
        ("kubelet:65536:65536\n", "kubelet:131072:65536\n", "mismatched subuids and subgids"),
        ("kubelet:65536:65536\n", "alice:1:2\n", "mismatched subuids and subgids"),
        ("alice:65536:65536\n", "alice:65536:65536\n", 'no subordinate ids for user "kubelet"'),
        ("kubelet:65536:65536\nkubelet:131072:65536\n", "", "has 2 entries"),
        ("kubelet:65536\n", "kubelet:65536\n", "invalid entry"),
        ("kubelet:-1:65536\n", "kubelet:-1:65536\n", "is not a uint32"),
        ("kubelet:0x10000:65536\n", "kubelet:0x10000:65536\n", "is not a uint32"),
        ("kubelet:65536:4294967296\n", "kubelet:65536:4294967296\n", "is not a uint32"),
    ],
)
def test_malformed_subid_files_are_refused(
    tmp_path: Path, uid: str, gid: str, message: str
) -> None:
    with pytest.raises(ir.IDRangeError, match=message):
        mappings(tmp_path, uid, gid)


def test_getsubids_answers_as_upstream_parses_it(tmp_path: Path) -> None:
    tool = tmp_path / "getsubids"
    tool.write_text('#!/bin/sh\necho "0: kubelet 65536 2147483648"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    got = ir.kubelet_mappings(getpwnam=lambda _n: _pw(), getsubids=str(tool))
    assert got == (65536, 2147483648)


def test_getsubids_with_different_uid_and_gid_answers_is_refused(tmp_path: Path) -> None:
    tool = tmp_path / "getsubids"
    tool.write_text(
        '#!/bin/sh\nif [ "$1" = -g ]; then echo "0: kubelet 131072 65536"; '
        'else echo "0: kubelet 65536 65536"; fi\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ir.IDRangeError, match='mismatched subuids and subgids for user "kubelet"'):
        ir.kubelet_mappings(getpwnam=lambda _n: _pw(), getsubids=str(tool))


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", "invalid line"),
        ("0: kubelet 65536\n", "invalid line"),
        ("0: kubelet 65536 65536\n1: kubelet 131072 65536\n", "it must contain only one line"),
        ("0: kubelet x 65536\n", "is not a uint32"),
    ],
)
def test_getsubids_output_that_upstream_refuses(out: str, message: str) -> None:
    with pytest.raises(ir.IDRangeError, match=message):
        ir.parse_getsubids_output(out)


# ------------------------------------------------------------ the checks
def test_a_good_range() -> None:
    r = ir.check_range(65536, 65536 * 200, 65536, 110)
    assert (r.first, r.length, r.ids_per_pod) == (65536, 65536 * 200, 65536)
    assert (
        ir.check_range(ir.DEFAULT_FIRST_ID, ir.DEFAULT_LENGTH, 65536, 110).length == 2**32 - 65536
    )


@pytest.mark.parametrize(
    ("first", "length", "ids", "max_pods", "message"),
    [
        # unaligned start
        (
            65537,
            65536 * 200,
            65536,
            110,
            "kubelet user assigned ID 65537 is not a multiple of 65536",
        ),
        # host ID 0 would be mapped
        (
            0,
            65536 * 200,
            65536,
            110,
            "kubelet user assigned ID 0 must be greater or equal to 65536",
        ),
        # a length that is not whole pods
        (65536, 65536 * 200 + 1, 65536, 110, "length 13107201 is not a multiple of 65536"),
        # too small for maxPods
        (65536, 65536 * 109, 65536, 110, "not enough to support 110 pods"),
        # idsPerPod not a multiple of the unit
        (65536, 65536 * 200, 1000, 110, "length 1000 is not a multiple of 65536"),
        # a bigger idsPerPod needs the start aligned to it
        (65536, 131072 * 200, 131072, 110, "ID 65536 is not a multiple of 131072"),
    ],
)
def test_ranges_upstream_refuses(
    first: int, length: int, ids: int, max_pods: int, message: str
) -> None:
    with pytest.raises(ir.IDRangeError, match=message):
        ir.check_range(first, length, ids, max_pods)


def test_the_default_range_limits_max_pods() -> None:
    """65535 slots of 65536 IDs: more pods than that need a smaller idsPerPod
    cannot help (65536 is the minimum), so upstream refuses to start."""
    ir.check_range(ir.DEFAULT_FIRST_ID, ir.DEFAULT_LENGTH, 65536, 65535)
    with pytest.raises(ir.IDRangeError, match="not enough to support 65536 pods"):
        ir.check_range(ir.DEFAULT_FIRST_ID, ir.DEFAULT_LENGTH, 65536, 65536)
