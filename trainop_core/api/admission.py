"""Admission warnings: what upstream's validating webhook accepts but warns about.

Kinds say it as data (`Kind.deprecated_fields`, `Kind.deprecation`); this module turns a
defaulted job into the warnings, worded as upstream's webhook words them. `trainop validate`
prints them, `TrainingClient.create` issues them as `AdmissionWarning`s (Python's warnings), and
the operator's validating webhook returns them to kubectl, and the controller also records them as
Warning events on the job (a cluster may run without the webhook; an event stays visible).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainop_core.api.job import TrainingJob

if TYPE_CHECKING:
    from trainop_core.kinds.base import Kind

EVENT_REASON = "AdmissionWarning"  # the operator's Warning event for each of them


class AdmissionWarning(UserWarning):
    """The category of the warnings `TrainingClient.create` issues (filter it like any other)."""


@dataclass(frozen=True)
class JobWarning:
    """One warning about an accepted job: the field it is about ("" for the whole job)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path} {self.message}" if self.path else self.message


def admission_warnings(job: TrainingJob, kind: Kind) -> list[JobWarning]:
    """Every warning upstream's webhook gives for `job` (defaulted; valid or not). Pure."""
    found = [JobWarning("", kind.deprecation)] if kind.deprecation else []
    wire = job.to_dict()
    for old, new in kind.deprecated_fields:
        if _lookup(wire, old) is not None:
            found.append(JobWarning(old, f"is deprecated, use {new} instead"))
    return found


def _lookup(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
