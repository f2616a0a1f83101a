"""The legacy container log links (pkg/kubelet/kuberuntime/legacy.go):
/var/log/containers/<pod>_<namespace>_<container>-<container id>.log points at
the container's log file under the pod logs directory. Log shippers still read
them; the node e2e spec "ContainerLogPath ... should print log to correct log
path" checks them.
"""

from __future__ import annotations

import logging
import os

from kubelet.util import filesystem

log = logging.getLogger(__name__)

CONTAINER_LOGS_DIR = "/var/log/containers"
LOG_SUFFIX = ".log"
# A file name longer than ext4 allows is cut, as upstream cuts it.
MAX_NAME_LEN = 255
MIN_ID_LEN = 6  # a runtime finds a container by an id prefix this long


def log_symlink(
    logs_dir: str, pod_name: str, namespace: str, container_name: str, container_id: str
) -> str | None:
    """The link's path; None when a name could leave the directory (never for
    names the API server validated)."""
    parts = (pod_name, namespace, container_name, container_id)
    # A leading dot would hide the link from log shippers' globs, as upstream refuses.
    if not all(filesystem.is_component(p) for p in parts) or pod_name.startswith("."):
        return None
    name = f"{pod_name}_{namespace}_{container_name}-{container_id}"
    return os.path.join(logs_dir, name[: MAX_NAME_LEN - len(LOG_SUFFIX)] + LOG_SUFFIX)


def container_id_of(link: str) -> str | None:
    """The container id a link's name ends with."""
    tail = os.path.basename(link).rsplit("-", 1)[-1]
    if not tail.endswith(LOG_SUFFIX):
        return None
    cid = tail[: -len(LOG_SUFFIX)]
    return cid if len(cid) >= MIN_ID_LEN else None


def create(container_log: str, link: str | None) -> None:
    """Link the container's log; only when the log exists (a link to nothing
    would only wait for the garbage collector)."""
    if link is None or not os.path.exists(container_log):
        return
    try:
        os.symlink(container_log, link)
    except OSError as err:
        log.error("Failed to create legacy log link %s -> %s: %s", link, container_log, err)


def remove(link: str | None) -> None:
    if link is None:
        return
    try:
        os.remove(link)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.error("Failed to remove legacy log link %s: %s", link, err)


def dangling(logs_dir: str) -> list[tuple[str, str | None]]:
    """(link, container id) of the links whose log file is gone."""
    try:
        names = os.listdir(logs_dir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        path = os.path.join(logs_dir, name)
        if name.endswith(LOG_SUFFIX) and os.path.islink(path) and not os.path.exists(path):
            out.append((path, container_id_of(path)))
    return out
