"""The host IDs the kubelet may hand to pods' user namespaces
(getKubeletMappings and parseGetSubIdsOutput in kubelet_pods.go, the range
checks of MakeUserNsManager).

Where they come from, in order:

1. no `kubelet` user on the node: upstream's default, every ID from 65536 up;
2. `getsubids` installed (shadow's tool, which also asks NSS subid providers):
   its one answer for `kubelet`, which must be the same for uids and gids, as
   upstream;
3. otherwise the `kubelet` entries of /etc/subuid and /etc/subgid read here
   (upstream falls back to the default range when getsubids is missing; an
   operator who wrote those files meant them, so they are honoured). Neither
   file: the default range.
"""

from __future__ import annotations

import logging
import pwd
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

KUBELET_USER = "kubelet"
# One user namespace unit: every pod gets a multiple of it (userNsUnitLength).
UNIT = 65536
DEFAULT_FIRST_ID = 1 << 16
DEFAULT_LENGTH = (1 << 32) - DEFAULT_FIRST_ID
_UINT32_MAX = (1 << 32) - 1
SUBUID, SUBGID = "/etc/subuid", "/etc/subgid"


class IDRangeError(ValueError):
    """The kubelet's ID range cannot be used; the kubelet does not start."""


@dataclass(frozen=True)
class IDRange:
    first: int  # first host ID the kubelet may map
    length: int  # how many IDs from there
    ids_per_pod: int  # the length of every pod's mapping


def _uint32(text: str, line: str) -> int:
    if not text.isdigit() or int(text) > _UINT32_MAX:
        raise IDRangeError(f"error parsing line {line!r}: {text!r} is not a uint32")
    return int(text)


def parse_getsubids_output(out: str) -> tuple[int, int]:
    """(first, length) from `getsubids kubelet`: one line "0: kubelet 65536 2147483648"."""
    lines = out.strip("\n").split("\n")
    if len(lines) != 1:
        raise IDRangeError(f"error parsing line {out!r}: it must contain only one line")
    parts = lines[0].split()
    if len(parts) != 4:
        raise IDRangeError(f"invalid line {out!r}")
    return _uint32(parts[2], out), _uint32(parts[3], out)


def parse_subid_file(text: str, path: str, user: str, uid: int) -> tuple[int, int] | None:
    """The one `name-or-uid:start:count` entry of `user` in a subuid/subgid
    file; None when it has none. Comments and blank lines are skipped; more
    than one entry, or a malformed one of this user, is an error."""
    found: list[tuple[int, int]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(":")
        if len(fields) != 3:
            if fields[0] in (user, str(uid)):
                raise IDRangeError(f"{path}:{n}: invalid entry {line!r}: want name:start:count")
            continue  # another user's problem: shadow's tools skip it too
        if fields[0] not in (user, str(uid)):
            continue
        found.append((_uint32(fields[1], line), _uint32(fields[2], line)))
    if len(found) > 1:
        raise IDRangeError(
            f'{path}: user "{user}" has {len(found)} entries; the kubelet needs exactly one'
        )
    return found[0] if found else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise IDRangeError(f"reading {path}: {err}") from err


def _from_files(user: str, uid: int, subuid: str, subgid: str) -> tuple[int, int] | None:
    texts = _read(subuid), _read(subgid)
    if texts == (None, None):
        return None
    uids = parse_subid_file(texts[0] or "", subuid, user, uid)
    gids = parse_subid_file(texts[1] or "", subgid, user, uid)
    if uids is None and gids is None:
        # The user exists and the files are there: configured for someone
        # else, not for the kubelet. Upstream refuses an empty getsubids answer.
        raise IDRangeError(f'no subordinate ids for user "{user}" in {subuid} and {subgid}')
    if uids != gids:
        raise IDRangeError(f'mismatched subuids and subgids for user "{user}"')
    return uids


def _from_getsubids(tool: str, user: str) -> tuple[int, int]:
    try:
        out_uids = subprocess.run([tool, user], capture_output=True, check=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise IDRangeError(f'error retrieving additional uids for user "{user}": {err}') from err
    try:
        out_gids = subprocess.run([tool, "-g", user], capture_output=True, check=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise IDRangeError(f'error retrieving additional gids for user "{user}"') from err
    if out_uids.stdout != out_gids.stdout:
        raise IDRangeError(f'mismatched subuids and subgids for user "{user}"')
    return parse_getsubids_output(out_uids.stdout)


def kubelet_mappings(
    *,
    user: str = KUBELET_USER,
    getpwnam: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    getsubids: str | None = None,
    subuid: str = SUBUID,
    subgid: str = SUBGID,
) -> tuple[int, int]:
    """(first host ID, length) the kubelet may use. IDRangeError when the node
    configured them in a way that cannot be used."""
    try:
        uid = getpwnam(user).pw_uid
    except KeyError:
        log.info("User namespaces: no user %r; the default ID range is used", user)
        return DEFAULT_FIRST_ID, DEFAULT_LENGTH
    tool = getsubids if getsubids is not None else shutil.which("getsubids")
    if tool:
        return _from_getsubids(tool, user)
    got = _from_files(user, uid, subuid, subgid)
    if got is None:
        log.info("User namespaces: neither %s nor %s; the default ID range is used", subuid, subgid)
        return DEFAULT_FIRST_ID, DEFAULT_LENGTH
    return got


def check_range(first: int, length: int, ids_per_pod: int, max_pods: int) -> IDRange:
    """MakeUserNsManager's checks, with its messages."""
    if ids_per_pod <= 0 or ids_per_pod % UNIT:
        raise IDRangeError(
            f"kubelet user namespace length {ids_per_pod} is not a multiple of {UNIT}"
        )
    if first % ids_per_pod:
        raise IDRangeError(f"kubelet user assigned ID {first} is not a multiple of {ids_per_pod}")
    if first < ids_per_pod:
        # Host ID 0 (root) is never mapped into a pod.
        raise IDRangeError(
            f"kubelet user assigned ID {first} must be greater or equal to {ids_per_pod}"
        )
    if length % ids_per_pod:
        raise IDRangeError(
            f"kubelet user assigned IDs length {length} is not a multiple of {ids_per_pod}"
        )
    if length // ids_per_pod < max_pods:
        raise IDRangeError(f"kubelet user assigned IDs are not enough to support {max_pods} pods")
    if first + length > _UINT32_MAX + 1:
        raise IDRangeError(f"kubelet user assigned IDs {first}+{length} go past {_UINT32_MAX}")
    return IDRange(first, length, ids_per_pod)


def node_range(
    ids_per_pod: int,
    max_pods: int,
    mappings: Callable[[], tuple[int, int]] | None = None,
) -> IDRange:
    """The checked range of this node (the kubelet's start refuses an error)."""
    first, length = (mappings or kubelet_mappings)()
    try:
        return check_range(first, length, ids_per_pod, max_pods)
    except IDRangeError as err:
        raise IDRangeError(f"create user namespace manager: {err}") from err
