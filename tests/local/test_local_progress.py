"""Training progress on the local backend with real replica processes: the supervisor reads the
primary replica's log file and writes its progress into the job; hostile output (nan, an endless
line, a flood) is left out and said once, and the supervisor carries on."""

from __future__ import annotations

from pathlib import Path

from builders import make_job
from local_helpers import py

from trainop_core.backends.local.state import JobDir
from trainop_core.client import TrainingClient, is_succeeded
from trainop_core.progress import trainer_status_of

HOSTILE = """
    import os, sys, time
    events = os.path.join(os.environ["TRAINOP_JOB_DIR"], "events.jsonl")

    def warned(count):  # until the supervisor has said so much (an event, not a pause)
        while sum('"ProgressDropped"' in line for line in open(events)) < count:
            time.sleep(0.05)

    print("loss=nan progressPercentage=150 acc=inf", flush=True)
    warned(2)  # not-finite, out-of-range
    sys.stdout.write("x=1 " * 150_000 + "\\n")  # 600 kB in one line
    sys.stdout.flush()
    warned(3)  # line-too-long
    for i in range(100_000):  # far more than a read keeps
        sys.stdout.write(f"noise {i} progressPercentage={i % 100}\\n")
    print("loss=0.25 progressPercentage=100 estimatedRemainingSeconds=0", flush=True)
"""


def test_the_primary_replicas_progress_survives_hostile_output_and_is_written_once_it_ends(
    client: TrainingClient, home: Path
) -> None:
    worker = py("print('progressPercentage=7 loss=9', flush=True)")
    job = make_job("PyTorchJob", "hostile").master(command=py(HOSTILE)).workers(1, command=worker)
    client.create(job.build())

    finished = client.wait("hostile", timeout=120)

    assert is_succeeded(finished)
    progress = trainer_status_of(finished)  # written before the status that ended the job
    assert progress is not None
    assert (progress.progress_percentage, progress.estimated_remaining_seconds) == (100, 0)
    assert dict(progress.metrics) == {"loss": "0.25"}  # the master's; nan and inf left out
    events = JobDir(home / "jobs" / "default" / "hostile").read_events()
    dropped = [e["message"] for e in events if e["reason"] == "ProgressDropped"]
    reasons = {message.split("(", 1)[1].split(")", 1)[0] for message in dropped}
    assert {"not-finite", "out-of-range", "line-too-long", "flood"} <= reasons
    assert len(dropped) == len(reasons)  # one warning per reason, the rest only counted
