"""What an admission handler returns for a pod it refuses (PodAdmitResult)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Rejection:
    reason: str
    message: str


class AdmissionRecoveryError(Exception):
    """An admission failure handler could not recover the pod (the pod is
    refused with UnexpectedAdmissionError)."""
