"""Server-side Table printing: CRD printer columns as `kubectl get` shows them."""

from typing import Any

import pytest

from trainop_core.testing.apiserver.tables import json_path

JOB: dict[str, Any] = {
    "metadata": {"name": "mnist"},
    "status": {"conditions": [{"type": "Created"}, {"type": "Running"}, {"type": "Succeeded"}]},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".status.conditions[-1:].type", "Succeeded"),
        (".status.conditions[0].type", "Created"),
        (".status.conditions[1:2].type", "Running"),
        (".metadata.name", "mnist"),
        (".status.conditions[7].type", None),
        (".status.replicaStatuses.Worker.active", None),
    ],
    ids=[
        "the last condition is what the State column shows",
        "an index picks one element",
        "a bounded slice picks its last element",
        "a plain field path is followed",
        "an index past the end is empty",
        "a missing field is empty",
    ],
)
def test_printer_column_paths(path: str, expected: Any) -> None:
    assert json_path(JOB, path) == expected
