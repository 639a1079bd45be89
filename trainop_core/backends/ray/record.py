"""A job's record in the cluster, for a supervisor that Ray restarts.

Ray restarts a job's supervisor whose process died (the OOM killer, a crash) a few times
(`MAX_RESTARTS`). The new process starts from the arguments the job was created with; what the
job became since (its status, annotations, suspension) is in the record the supervisor keeps in
Ray's internal key-value store (in the GCS, like the actor's name), rewritten whenever it
changes and removed when the job is deleted. A record of an earlier job of the same name (another
uid) is never taken, and is replaced when that name is used again (a supervisor that died for
good leaves its record until then). Records are small: the job's wire form, no output.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ray.experimental import internal_kv

KV_NAMESPACE = "trainop"
MAX_RESTARTS = 3


def _key(job_key: str) -> bytes:
    return f"job:{job_key}".encode()


def save(job_key: str, wire: dict[str, Any]) -> None:
    """Write (replace) the record of `job_key` (namespace/name); may do I/O (the GCS)."""
    data = json.dumps(wire, separators=(",", ":")).encode()
    internal_kv._internal_kv_put(_key(job_key), data, overwrite=True, namespace=KV_NAMESPACE)


def load(job_key: str, uid: str) -> dict[str, Any] | None:
    """The record of `job_key` if it is of the job with `uid`, else None (none, another job's,
    or unreadable)."""
    data = internal_kv._internal_kv_get(_key(job_key), namespace=KV_NAMESPACE)
    if not data:
        return None
    with contextlib.suppress(ValueError, RecursionError):
        wire = json.loads(data)
        if isinstance(wire, dict) and (wire.get("metadata") or {}).get("uid") == uid:
            return wire
    return None


def remove(job_key: str) -> None:
    """Forget the record of `job_key` (idempotent)."""
    with contextlib.suppress(Exception):  # a lost GCS connection: nothing to restart from either
        internal_kv._internal_kv_del(_key(job_key), namespace=KV_NAMESPACE)
