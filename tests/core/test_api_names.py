"""Names and namespaces are checked on every TrainingClient call, reads included, before any
backend is asked: nothing can name a path or URL outside the backend's store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainop_core.api.names import check_job_ref, check_replica
from trainop_core.client import TrainingClient
from trainop_core.errors import InvalidNameError


class RecordingBackend:
    """A backend that records every call (and has no jobs)."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args))
            return []

        return record


CALLS: list[tuple[str, Callable[[TrainingClient, str, str], Any]]] = [
    ("get", lambda c, name, ns: c.get(name, ns)),
    ("wait", lambda c, name, ns: c.wait(name, ns, timeout=1)),
    ("logs", lambda c, name, ns: c.logs(name, ns)),
    ("logs -f", lambda c, name, ns: c.logs(name, ns, follow=True)),
    ("delete", lambda c, name, ns: c.delete(name, ns)),
    ("stop", lambda c, name, ns: c.stop(name, ns)),
    ("suspend", lambda c, name, ns: c.suspend(name, ns)),
    ("resume", lambda c, name, ns: c.resume(name, ns)),
    ("list", lambda c, name, ns: c.list(ns)),
]
BAD = [
    ("demo", "../../somewhere"),
    ("../../etc", "default"),
    ("demo", "a/b"),
    ("x/../../y", "default"),
    ("demo", ""),
    ("Demo", "default"),
    ("demo", "x" * 64),
    ("demo", "ns\x00"),
    ("demo", 5),
]


CASES = [
    (call_name, call, name, "../x" if namespace == "" and call_name != "list" else namespace)
    for call_name, call in CALLS
    for name, namespace in BAD
    if call_name != "list" or name == "demo"  # list takes a namespace only
]


@pytest.mark.parametrize(
    ("call_name", "call", "name", "namespace"),
    CASES,
    ids=[f"{c[0]} of {c[2]!r:.20}/{c[3]!r:.20}" for c in CASES],
)
def test_no_backend_is_asked_about_a_name_no_job_can_have(
    call_name: str, call: Callable[..., Any], name: str, namespace: str
) -> None:
    backend = RecordingBackend()
    client = TrainingClient(backend)  # type: ignore[arg-type]
    with pytest.raises(InvalidNameError):
        call(client, name, namespace)
    assert backend.calls == []


def test_a_replica_name_is_checked_before_the_backend_is_asked() -> None:
    backend = RecordingBackend()
    with pytest.raises(InvalidNameError, match="replica"):
        TrainingClient(backend).logs("demo", "default", replica="../../etc/passwd")  # type: ignore[arg-type]
    assert backend.calls == []


@pytest.mark.parametrize(
    ("name", "namespace"), [("demo", "default"), ("my.job-1", "team-a"), ("a" * 253, "b" * 63)]
)
def test_names_kubernetes_would_store_are_accepted(name: str, namespace: str) -> None:
    check_job_ref(name, namespace)
    check_replica("worker-12")
