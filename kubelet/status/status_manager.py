"""The status manager: the latest PodStatus per pod, versioned and deduplicated.

In standalone mode it is what /pods serves; in cluster mode it also writes
changes to the API server (pods/status).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Versioned:
    status: dict[str, Any]
    version: int


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    # Transition times alone do not make a new status.
    s = dict(status)
    s["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    return s


class StatusManager:
    def __init__(self) -> None:
        self._statuses: dict[str, Versioned] = {}
        self.updates = 0

    def get(self, uid: str) -> dict[str, Any] | None:
        v = self._statuses.get(uid)
        return v.status if v else None

    def version(self, uid: str) -> int:
        v = self._statuses.get(uid)
        return v.version if v else 0

    def set_pod_status(self, uid: str, status: dict[str, Any]) -> bool:
        """Store a new status; False when nothing but timestamps changed."""
        cur = self._statuses.get(uid)
        if cur is not None and _comparable(cur.status) == _comparable(status):
            return False
        self._statuses[uid] = Versioned(status, (cur.version if cur else 0) + 1)
        self.updates += 1
        return True

    def terminate(self, uid: str, reason_phase: str | None = None) -> None:
        cur = self._statuses.get(uid)
        if cur is None:
            return
        st = dict(cur.status)
        if reason_phase and st.get("phase") not in ("Succeeded", "Failed"):
            st["phase"] = reason_phase
        self.set_pod_status(uid, st)

    def remove(self, uid: str) -> None:
        self._statuses.pop(uid, None)

    def uids(self) -> list[str]:
        return list(self._statuses)
