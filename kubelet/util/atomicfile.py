"""Whole-file writes that a crash cannot leave half done: the content goes to a
temp file in the same directory, is flushed to disk, and is renamed over the
target, then the directory entry is flushed too. A reader sees the old file or
the new one, never a truncated mix, after a kill -9 or a power loss; a full
disk fails the write and leaves the old file in place."""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_atomic(path: str, data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `data` (permissions `mode`, not subject to the umask).

    durable=False skips the fsyncs: still never torn by a crash of this process,
    for files rewritten from their source whenever they differ (a power loss may
    leave them empty, and the next write repairs them)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
