"""Each kind's status rule (reference §2), as a pure function of the replica counts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.builders import JobBuilder, make_job
from tests.core._kind_builders import REGISTRY, T0, defaulted, kind_of
from trainop_core.api.load import load_job
from trainop_core.api.types import ConditionStatus, ConditionType, JobCondition, JobStatus
from trainop_core.api.types import RestartPolicy as RP
from trainop_core.kinds.base import ReplicaCounts as RC
from trainop_core.kinds.base import Verdict
from trainop_core.kinds.tensorflow import tensorflow_status
from trainop_core.planner.conditions import set_condition


def states(result: Verdict | Sequence[Verdict]) -> list[str]:
    """The condition types a kind's verdict(s) would leave True, newest last (the planner
    applies a sequence in order through upstream's condition rules)."""
    status = JobStatus()
    for v in [result] if isinstance(result, Verdict) else result:
        if v.state:
            set_condition(status, ConditionType(v.state), ConditionStatus.TRUE, v.state, "", T0)
    return [c.type.value for c in status.conditions if c.status == ConditionStatus.TRUE]


def verdict(b: JobBuilder, counts: dict[str, RC], worker0: bool = False) -> str:
    """The job's state after this round: its newest True condition ("" for none)."""
    job = defaulted(load_job(b.build(), registry=REGISTRY))
    true = states(kind_of(job.kind).status(job, counts, worker0))
    return true[-1] if true else ""


CASES = [
    # TensorFlow
    (make_job("TFJob").chief().workers(2),
     {"Chief": RC(1, succeeded=1), "Worker": RC(2, active=2)}, False, "Succeeded",
     "TF with a chief succeeds when the chief succeeds"),
    (make_job("TFJob").chief().workers(2), {"Chief": RC(1, active=1), "Worker": RC(2)}, False,
     "Running", "TF with a chief runs while the chief runs"),
    (make_job("TFJob").workers(3), {"Worker": RC(3, active=2, succeeded=1)}, True,
     "Succeeded", "TF without chief succeeds when worker 0 exits cleanly"),
    (make_job("TFJob").workers(3).spec(successPolicy="AllWorkers"),
     {"Worker": RC(3, active=2, succeeded=1)}, True,
     "Running", "TF AllWorkers keeps running after worker 0"),
    (make_job("TFJob").workers(2).spec(successPolicy="AllWorkers"),
     {"Worker": RC(2, succeeded=2)}, False, "Succeeded", "TF AllWorkers succeeds with all workers"),
    (make_job("TFJob").ps().workers(2),
     {"PS": RC(1, active=1), "Worker": RC(2, active=1, failed=1)}, False, "Failed",
     "TF fails when a worker fails"),
    (make_job("TFJob").ps().workers(2).spec(enableDynamicWorker=True),
     {"PS": RC(1, active=1), "Worker": RC(2, active=1, failed=1)}, False,
     "Running", "TF with dynamic workers ignores a failed worker"),
    (make_job("TFJob").chief().evaluator(),
     {"Chief": RC(1, active=1), "Evaluator": RC(1, failed=1)}, False, "Failed",
     "TF fails when the evaluator fails"),
    # upstream's own table (tensorflow/status_test.go, release-1.9)
    (make_job("TFJob").chief().ps(2).workers(4),
     {"Chief": RC(1, succeeded=1), "PS": RC(2, active=2), "Worker": RC(4, failed=4)}, False,
     "Succeeded", "TF whose chief succeeded while the workers failed succeeds: the chief decides"),
    (make_job("TFJob").chief().ps(2).workers(4),
     {"Chief": RC(1, failed=1), "PS": RC(2, active=2), "Worker": RC(4, succeeded=4)}, False,
     "Failed", "TF whose chief failed while the workers succeeded fails"),
    (make_job("TFJob").chief().ps(2).workers(4),
     {"Chief": RC(1, active=1), "PS": RC(2, active=1, failed=1), "Worker": RC(4, succeeded=4)},
     False, "Failed", "TF with a running chief fails when a PS fails"),
    (make_job("TFJob").ps(2).workers(4),
     {"PS": RC(2, active=2), "Worker": RC(4, succeeded=2, failed=2)}, False,
     "Failed", "TF without chief fails when workers fail though others succeeded"),
    (make_job("TFJob").ps(2).workers(4),
     {"PS": RC(2, failed=1, active=1), "Worker": RC(4, active=3, succeeded=1)}, True,
     "Failed", "TF without chief fails when a PS fails before worker 0 is read"),
    (make_job("TFJob").workers(4),
     {"Worker": RC(4, succeeded=1, active=3)}, True,
     "Succeeded", "TF without chief succeeds with worker 0 while the others run"),
    (make_job("TFJob").workers(2).replica("Sidecar", 1),
     {"Worker": RC(2, active=2), "Sidecar": RC(1, failed=1)}, False,
     "Running", "TF does not read replica types upstream does not know"),
    # PyTorch
    (make_job("PyTorchJob").master().workers(2),
     {"Master": RC(1, succeeded=1), "Worker": RC(2, active=2)}, False,
     "Succeeded", "PyTorch succeeds when the master succeeds"),
    (make_job("PyTorchJob").workers(2), {"Worker": RC(2, active=1, succeeded=1)}, False,
     "Running", "PyTorch worker-only waits for every worker"),
    (make_job("PyTorchJob").workers(2).spec(elasticPolicy={}),
     {"Worker": RC(2, active=1, succeeded=1)}, False,
     "Succeeded", "elastic PyTorch succeeds with the first finished worker"),
    (make_job("PyTorchJob").master().workers(2),
     {"Master": RC(1, active=1), "Worker": RC(2, active=1, failed=1, restart_policy=RP.ON_FAILURE)},
     False, "Restarting", "PyTorch restarts failed OnFailure workers"),
    (make_job("PyTorchJob").master().workers(2),
     {"Master": RC(1, active=1), "Worker": RC(2, active=1, failed=1, restart_policy=RP.NEVER)},
     False, "Failed", "PyTorch fails failed Never workers"),
    # Paddle (PyTorch's rule, no elastic early success)
    (make_job("PaddleJob").master().workers(2),
     {"Master": RC(1, succeeded=1), "Worker": RC(2, active=2)}, False,
     "Succeeded", "Paddle in PS mode succeeds when the master succeeds"),
    (make_job("PaddleJob").workers(2).spec(elasticPolicy={}),
     {"Worker": RC(2, active=1, succeeded=1)}, False,
     "Running", "collective Paddle waits for every worker, elastic or not"),
    (make_job("PaddleJob").workers(2),
     {"Worker": RC(2, active=1, failed=1, restart_policy=RP.ON_FAILURE)}, False,
     "Restarting", "Paddle restarts failed OnFailure workers"),
    (make_job("PaddleJob").master().workers(2),
     {"Master": RC(1, active=1), "Worker": RC(2, active=1, failed=1, restart_policy=RP.NEVER)},
     False, "Failed", "Paddle fails failed Never workers"),
    # MXNet
    (make_job("MXJob").scheduler().servers().workers(2),
     {"Scheduler": RC(1, succeeded=1), "Server": RC(1, active=1), "Worker": RC(2)}, False,
     "Succeeded", "MXNet succeeds when the scheduler succeeds"),
    (make_job("MXJob").workers(1), {"Worker": RC(1, succeeded=1)}, False,
     "Succeeded", "a single-worker MXNet job succeeds with its worker"),
    (make_job("MXJob").scheduler().workers(2),
     {"Scheduler": RC(1, active=1), "Worker": RC(2, failed=1, restart_policy=RP.EXIT_CODE)},
     False, "Restarting", "MXNet restarts only ExitCode failures"),
    (make_job("MXJob").scheduler().workers(2),
     {"Scheduler": RC(1, active=1), "Worker": RC(2, failed=1, restart_policy=RP.ON_FAILURE)},
     False, "Failed", "MXNet fails any other failure"),
    # XGBoost
    (make_job("XGBoostJob").master().workers(2),
     {"Master": RC(1, succeeded=1), "Worker": RC(2, active=2)}, False,
     "Succeeded", "XGBoost succeeds when the master succeeds"),
    (make_job("XGBoostJob").master().workers(2),
     {"Master": RC(1, active=1), "Worker": RC(2, failed=1, restart_policy=RP.EXIT_CODE)}, False,
     "Restarting", "XGBoost restarts ExitCode failures"),
    (make_job("XGBoostJob").master().workers(2),
     {"Master": RC(1), "Worker": RC(2, failed=1, restart_policy=RP.ON_FAILURE)}, False,
     "Failed", "XGBoost fails any other failure"),
    (make_job("XGBoostJob").master().workers(2), {"Master": RC(1), "Worker": RC(2, active=2)},
     False, "", "XGBoost says nothing while the master is pending"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("b", "counts", "worker0", "expected"),
    [c[:4] for c in CASES],
    ids=[c[4] for c in CASES],
)
def test_kind_status_rule(
    b: JobBuilder, counts: dict[str, RC], worker0: bool, expected: str
) -> None:
    assert verdict(b, counts, worker0) == expected


def test_tf_stays_restarting_while_a_restart_is_under_way() -> None:
    job = defaulted(make_job("TFJob", "t").ps().workers(2).job())
    restarting = JobCondition(type=ConditionType.RESTARTING, status=ConditionStatus.TRUE)
    job.status = JobStatus(conditions=[restarting])
    counts = {"PS": RC(1, active=1), "Worker": RC(2, active=1, failed=1)}
    assert states(kind_of("TFJob").status(job, counts, False)) == ["Restarting"]


def test_tf_records_running_before_the_failure_that_ends_the_job() -> None:
    """Upstream sets Running for the active chief, then Failed for the workers, in one pass:
    the job shows it ran (Running=False, kept) before it failed."""
    job = defaulted(make_job("TFJob", "t").chief().workers(2).job())
    counts = {"Chief": RC(1, active=1), "Worker": RC(2, active=1, failed=1)}
    result = tensorflow_status(job, counts, False)
    assert [v.state for v in result] == ["Running", "Failed"]
    assert result[1].message == "TFJob default/t has failed because 1 Worker replica(s) failed."


def test_a_tf_job_that_fails_while_its_chief_runs_shows_it_ran_first() -> None:
    """Through the planner: upstream's one pass records Running (then False) before Failed."""
    from trainop_core.planner import KubernetesAddressing, Observed, ObservedPod, plan

    job = load_job(make_job("TFJob", "t").chief().workers(1).build(), registry=REGISTRY)
    kind = kind_of("TFJob")
    pods = (
        ObservedPod("t-chief-0", "Chief", 0, "Running"),
        ObservedPod("t-worker-0", "Worker", 0, "Failed", exit_code=1),
    )
    status = plan(job, kind, Observed(pods=pods), T0, KubernetesAddressing(job, kind)).status
    assert status is not None
    assert [(c.type.value, c.status.value) for c in status.conditions] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Failed", "True"),
    ]
