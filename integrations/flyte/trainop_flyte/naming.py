"""Deterministic job names: one Flyte task attempt is one job, whatever calls `create` twice."""

from __future__ import annotations

import hashlib
import re

from flytekit.models.task import TaskExecutionMetadata

_MAX_PREFIX = 24


def job_name(task_name: str, metadata: TaskExecutionMetadata | None, fallback_seed: str) -> str:
    """`<task>-<digest>`: the digest covers the task execution id (project, domain, execution,
    node, retry attempt), so a repeated create for one attempt names the same job and a retry a
    new one. Without Flyte metadata (local runs) `fallback_seed` (the output prefix) is used."""
    seed = _execution_key(metadata) if metadata is not None else fallback_seed
    digest = hashlib.sha256(seed.encode()).hexdigest()[:10]
    return f"{_prefix(task_name)}-{digest}"


def _execution_key(metadata: TaskExecutionMetadata) -> str:
    tid = metadata.task_execution_id
    node = tid.node_execution_id
    execution = node.execution_id
    parts = (execution.project, execution.domain, execution.name, node.node_id, tid.retry_attempt)
    return "/".join(str(part) for part in parts)


def _prefix(task_name: str) -> str:
    short = task_name.rsplit(".", 1)[-1].lower()
    cleaned = re.sub(r"[^a-z0-9]+", "-", short).strip("-")[:_MAX_PREFIX].strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"job-{cleaned}".strip("-")
    return cleaned
