"""Termination messages (kuberuntime_container.go makeMounts / getTerminationMessage /
readLastStringFromContainerLogs and status_manager.go normalizeStatus upstream).

Before a container with a terminationMessagePath is created, an empty file
`<pod dir>/containers/<name>/<8 hex digits>` is made (a new one per instance)
and bind-mounted at that path. After the container exits its message is the
last 4 KiB of that file; with FallbackToLogsOnError and a failure, an empty or
missing file gives the last 80 log lines instead, at most their last 2 KiB.
What goes into the pod status is then cut to 12 KiB shared evenly by all the
pod's containers.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kubelet.kuberuntime.logs import LogOptions, read_logs
from kubelet.types import CONTAINER_KINDS, Pod, containers_of
from kubelet.util import filesystem

log = logging.getLogger(__name__)

CONTAINERS_DIR = "containers"
CONTAINER_DIR_MODE = 0o750
TERMINATION_LOG_MODE = 0o666  # the container may run as any user

MAX_POD_TERMINATION_MESSAGE_LENGTH = 12 * 1024
MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH = 4 * 1024
MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH = 2 * 1024
MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES = 80

FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"

# Reads the tail of the container's log: the last `lines` lines, their output
# cut to its last `max_bytes`.
LogTailReader = Callable[[int, int], Awaitable[str]]


def pod_container_dir(pod_dir: str, container_name: str) -> str:
    return os.path.join(
        pod_dir, CONTAINERS_DIR, filesystem.component(container_name, "container name")
    )


def create_termination_log_file(pod_dir: str, container_name: str) -> str:
    """A new empty termination-log file for one instance of the container, its
    mode 0666 whatever the umask. Returns "" when it cannot be made: upstream
    then starts the container without the mount and only logs the error."""
    directory = os.path.join(pod_dir, CONTAINERS_DIR, container_name)
    try:
        directory = pod_container_dir(pod_dir, container_name)
        filesystem.mkdir_all(directory, CONTAINER_DIR_MODE)
        path = os.path.join(directory, f"{secrets.randbits(32):08x}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(path, flags, 0o600))
    except (OSError, ValueError) as err:
        log.error("error on creating termination-log file in %s: %s", directory, err)
        return ""
    try:
        os.chmod(path, TERMINATION_LOG_MODE)
    except OSError as err:
        log.error("unable to set termination-log file permissions %s: %s", path, err)
    return path


def termination_message_host_path(
    mounts: Iterable[Mapping[str, Any]], termination_message_path: str
) -> str:
    """The host file mounted at terminationMessagePath, from the CRI container
    status's mounts (containerPath/hostPath), or ""."""
    if not termination_message_path:
        return ""
    for m in mounts:
        if m.get("containerPath") == termination_message_path:
            return str(m.get("hostPath") or "")
    return ""


def _go_open_error(path: str, err: OSError) -> str:
    # Go's *PathError text, e.g. "open /x: permission denied"
    return f"open {path}: {(err.strerror or str(err)).lower()}"


def _read_tail(path: str, limit: int, container_dir: str) -> bytes:
    """The last `limit` bytes of the file (tail.ReadAtMost). The file is one
    the kubelet made in the container's own directory; the container wrote
    into it and may have had a hand in what it is, so: opened relative to
    that directory, never through a link (O_NOFOLLOW on both), without
    blocking on a FIFO or a device (O_NONBLOCK), and read only if it is a
    regular file."""
    if not container_dir or os.path.dirname(path) != container_dir.rstrip("/"):
        raise OSError(errno.EACCES, "not in the container's termination-log directory", path)
    dir_fd = os.open(container_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(
            os.path.basename(path),
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            dir_fd=dir_fd,
        )
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise OSError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        start = max(0, st.st_size - limit)
        out = bytearray()
        while len(out) < limit:
            chunk = os.pread(fd, limit - len(out), start + len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    finally:
        os.close(fd)


def _from_file(host_path: str, fallback: bool, container_dir: str) -> tuple[str, bool]:
    """The file's message and whether to read the logs instead (getTerminationMessage)."""
    if not host_path:
        return "", fallback
    try:
        data = _read_tail(host_path, MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH, container_dir)
    except FileNotFoundError:
        return "", fallback
    except OSError as err:
        return (
            f"Error on reading termination log {host_path}: {_go_open_error(host_path, err)}",
            False,
        )
    return data.decode("utf-8", "replace"), fallback and not data


async def read_termination_message(
    host_path: str,
    policy: str,
    exit_code: int,
    reason: str,
    log_tail_reader: LogTailReader,
    container_dir: str,
) -> str:
    """The message of an exited container.

    host_path: termination_message_host_path of its status ("" when it had none);
    policy: terminationMessagePolicy; exit_code and reason from the CRI status
    (a container that could not run has no logs to fall back to);
    container_dir: pod_container_dir of the container, the only place a
    termination-log file is read from (the runtime only echoes the path).
    """
    fallback = (
        policy == FALLBACK_TO_LOGS_ON_ERROR and exit_code != 0 and reason != "ContainerCannotRun"
    )
    message, check_logs = _from_file(host_path, fallback, container_dir)
    if check_logs:
        message = await log_tail_reader(
            MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES,
            MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH,
        )
    return message


def container_status_message(runtime_message: str, termination_message: str) -> str:
    """The CRI status message with the termination message appended after ': '."""
    if not termination_message:
        return runtime_message
    return f"{runtime_message}: {termination_message}" if runtime_message else termination_message


def cri_log_tail_reader(log_path: str) -> LogTailReader:
    """A LogTailReader over a CRI log file (ReadLogs into a circular buffer)."""

    async def read(lines: int, max_bytes: int) -> str:
        buf = bytearray()

        async def write(chunk: bytes) -> None:
            buf.extend(chunk)
            if len(buf) > max_bytes:
                del buf[: len(buf) - max_bytes]

        async def running() -> bool:
            return False

        try:
            await read_logs(log_path, LogOptions(tail_lines=lines), write, running)
        except OSError as err:
            return (
                f"Error on reading termination message from logs: {_go_open_error(log_path, err)}"
            )
        return bytes(buf).decode("utf-8", "replace")

    return read


def pod_message_budget(pod: Pod) -> int:
    """Bytes of termination message each container status may keep: 12 KiB shared
    by all containers, init and ephemeral ones included."""
    spec = pod.get("spec") or {}
    n = sum(len(containers_of(spec, kind)) for kind in CONTAINER_KINDS)
    return MAX_POD_TERMINATION_MESSAGE_LENGTH // n if n else MAX_POD_TERMINATION_MESSAGE_LENGTH


def truncate_message(message: str, budget: int) -> str:
    """The message cut to `budget` bytes of UTF-8, as the status manager does
    before it sends a status (a split character becomes U+FFFD, as in the API)."""
    raw = message.encode("utf-8", "surrogateescape")
    if len(raw) <= budget:
        return message
    return raw[:budget].decode("utf-8", "replace")
