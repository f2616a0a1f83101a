"""What an admission handler returns for a pod it refuses (PodAdmitResult)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Rejection:
    reason: str
    message: str
