"""Training progress on a real multi-node Ray cluster: the job's supervisor actor folds what the
primary replica prints (its actor's output chunks) into the job's progress, as the local
supervisor and the operator do."""

from __future__ import annotations

from builders import make_job
from ray_helpers import py, tagged, until

from trainop_core.client import TrainingClient, is_succeeded
from trainop_core.progress import trainer_status_of

TRAIN = py(
    """
    import time
    for step in range(1, 11):
        print(f"loss={1 / step:.3f} progressPercentage={step * 10} step={step}", flush=True)
        time.sleep(0.4)
    print("loss=nan")  # dropped, and the job said so once
    """
)
WORKER = py("print('progressPercentage=99 loss=9', flush=True)")


def test_the_primary_replicas_progress_reaches_the_job_while_it_runs_and_at_its_end(
    client: TrainingClient, tag: str
) -> None:
    builder = make_job("PyTorchJob", "rp").master(command=TRAIN).workers(1, command=WORKER)
    client.create(tagged(builder, tag))
    early = until(lambda: trainer_status_of(client.get("rp")), 90, "a first progress")
    assert early.progress_percentage is not None and early.progress_percentage < 100
    job = client.wait("rp", timeout=120)
    assert is_succeeded(job)
    final = until(
        lambda: (p := trainer_status_of(client.get("rp"))) and p.progress_percentage == 100 and p,
        30,
        "the last progress",
    )
    assert dict(final.metrics) == {"loss": "0.1", "step": "10"}  # never the worker's
    events = until(
        lambda: [
            e for e in client.backend.events("rp", "default") if e.reason == "ProgressDropped"
        ],
        30,
        "the warning about the nan",
    )
    assert "not-finite" in events[0].message
