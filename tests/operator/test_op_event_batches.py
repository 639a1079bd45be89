"""One Event for the children one reconcile wrote, with what upstream says per child."""

from __future__ import annotations

import pytest

from trainop_core.operator.effects import done_message


@pytest.mark.parametrize(
    ("verb", "kind", "names", "message"),
    [
        ("Created", "Pod", ["a-worker-0"], "Created pod: a-worker-0"),  # upstream's own message
        ("Deleted", "Service", ["a-0", "a-1"], "Deleted 2 services: a-0, a-1"),
        (
            "Created",
            "Pod",
            [f"p-{i}" for i in range(13)],
            "Created 13 pods: p-0, p-1, p-2, p-3, p-4, p-5, p-6, p-7, p-8, p-9 and 3 more",
        ),
    ],
    ids=["one child as upstream", "several named", "a big batch is bounded"],
)
def test_a_batch_of_children_is_one_message(
    verb: str, kind: str, names: list[str], message: str
) -> None:
    assert done_message(verb, kind, names) == message


def test_a_thousand_children_still_make_a_short_message() -> None:
    names = [f"job-with-a-long-name-worker-{i}" for i in range(1000)]
    message = done_message("Created", "Pod", names)
    assert message.startswith("Created 1000 pods: job-with-a-long-name-worker-0, ")
    assert message.endswith(" and 990 more") and len(message) < 500
