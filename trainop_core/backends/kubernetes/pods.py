"""A job's pods on the API server: list them, delete them, read and stream their logs.

Pods stay raw JSON dicts (`_preload_content=False`): the generated models cost ~0.5 ms a pod.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.backends.kubernetes.errors import ApiError, translate
from trainop_core.kinds.base import Kind
from trainop_core.runtimes.kind import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
STARTED_PHASES = ("Running", "Succeeded", "Failed")
LIVE_PHASES = ("Pending", "Running", "Unknown", "")
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ReplicaPod:
    """One replica's pod: its tag (`master-0`), pod name and uid, phase, and the container read."""

    tag: str
    pod: str
    uid: str
    phase: str
    container: str
    order: tuple[int, int]  # (replica type's position in the kind, index): master before workers

    @property
    def started(self) -> bool:
        return self.phase in STARTED_PHASES

    @property
    def live(self) -> bool:
        return self.phase in LIVE_PHASES


def replica_pod(pod: dict[str, Any], kind: Kind) -> ReplicaPod:
    """A pod's replica from upstream's labels, else from a JobSet's (a TrainJob's node pods carry
    those whoever runs them: trainop's operator or Trainer)."""
    labels = pod["metadata"].get("labels") or {}
    rtype = labels.get(REPLICA_TYPE_LABEL) or labels.get(REPLICATED_JOB_LABEL, "")
    index = labels.get(REPLICA_INDEX_LABEL) or labels.get(COMPLETION_INDEX_LABEL, "0")
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    container = kind.default_container if kind.default_container in names or not names else names[0]
    rank = [t.lower() for t in kind.replica_types]
    position = rank.index(rtype) if rtype in rank else len(rank)
    return ReplicaPod(
        tag=f"{rtype}-{index}",
        pod=pod["metadata"]["name"],
        uid=pod["metadata"].get("uid", ""),
        phase=(pod.get("status") or {}).get("phase", ""),
        container=container,
        order=(position, int(index) if index.isdigit() else 0),
    )


class Pods:
    """Pod reads, deletes and logs for jobs; `kubernetes` is imported on construction."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)

    def of_job(self, kind: Kind, namespace: str, job: str) -> list[ReplicaPod]:
        """The job's pods (upstream's job-name and operator-name labels; a TrainJob's trainer
        nodes by the JobSet labels the Kubeflow SDK selects them by), master first."""
        items = self.raw_of_job(kind, namespace, job)
        return sorted((replica_pod(p, kind) for p in items), key=lambda p: p.order)

    def raw_of_job(self, kind: Kind, namespace: str, job: str) -> list[dict[str, Any]]:
        """The job's pods as the API server returns them (see `of_job`)."""
        selector = f"{JOB_NAME_LABEL}={job},{OPERATOR_NAME_LABEL}={kind.controller_name}"
        if kind.kind == v2.TRAINJOB:
            selector = f"{JOBSET_NAME_LABEL}={job},{REPLICATED_JOB_LABEL}={v2.NODE}"
        data = _request(  # the body is read inside: an answer that breaks off is an ApiError
            lambda: (
                self._core.list_namespaced_pod(
                    namespace, label_selector=selector, _preload_content=False
                ).data
            ),
            what=f"pods of {namespace}/{job}",
        )
        items: list[dict[str, Any]] = json.loads(data).get("items") or []
        return items

    def events(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The core/v1 events about the object with `uid` (what the operator records on a job)."""
        data = _request(
            lambda: (
                self._core.list_namespaced_event(
                    namespace, field_selector=f"involvedObject.uid={uid}", _preload_content=False
                ).data
            ),
            what=f"events in {namespace}",
        )
        items: list[dict[str, Any]] = json.loads(data).get("items") or []
        return items

    def delete(self, namespace: str, pod: str) -> None:
        """DELETE the pod (default grace period); NotFoundError if it is already gone."""
        _request(
            lambda: self._core.delete_namespaced_pod(pod, namespace, _preload_content=False),
            what=f"pod {namespace}/{pod}",
        )

    def read_log(self, namespace: str, pod: ReplicaPod, tail: int | None = None) -> Iterator[str]:
        """The pod's log so far (its last `tail` lines), line by line as it is read (constant
        memory)."""
        response = _request(
            lambda: self._core.read_namespaced_pod_log(
                pod.pod, namespace, container=pod.container, _preload_content=False, **_tail(tail)
            ),
            what=f"log of pod {namespace}/{pod.pod}",
        )
        try:
            yield from _lines(response)
        finally:
            response.release_conn()

    def stream_log(self, namespace: str, pod: ReplicaPod, tail: int | None = None) -> Iterator[str]:
        """The pod's log from the start (from its last `tail` lines), line by line as written,
        until its container ends."""
        response = _request(
            lambda: self._core.read_namespaced_pod_log(
                pod.pod,
                namespace,
                container=pod.container,
                follow=True,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, None),
                **_tail(tail),
            ),
            what=f"log of pod {namespace}/{pod.pod}",
        )
        try:
            yield from _lines(response)
        finally:
            response.release_conn()


def _tail(lines: int | None) -> dict[str, int]:
    return {} if lines is None else {"tail_lines": lines}


CHUNK_BYTES = 64 * 1024
MAX_LINE_BYTES = 256 * 1024  # a longer line (no newline for ages) is handed out in pieces


def _lines(response: Any) -> Iterator[str]:
    """Split a streamed body into lines, keeping empty ones (a log's blank lines are content);
    reads at most CHUNK_BYTES at a time and holds at most MAX_LINE_BYTES of an unended line."""
    buffer = b""
    for chunk in response.stream(amt=CHUNK_BYTES, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", errors="replace")
        while len(buffer) > MAX_LINE_BYTES:
            yield buffer[:MAX_LINE_BYTES].decode("utf-8", errors="replace")
            buffer = buffer[MAX_LINE_BYTES:]
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


def _request(request: Callable[[], Any], *, what: str) -> Any:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return request()
    except ApiException as exc:
        raise translate(exc, what=what) from exc
    except HTTPError as exc:
        raise ApiError(f"{what}: {exc}") from exc
