"""The task config and its one translation to a core job: generic, validated by the core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trainop_flyte
from flytekit import Resources, task
from trainop_flyte import MPI, MXNet, Paddle, PyTorch, Replica, TensorFlow, TrainingJob, XGBoost
from trainop_flyte.compat import CompatError
from trainop_flyte.replicas import run_container
from trainop_flyte.spec import Container, build_job, job_manifest
from trainop_flyte.trainjob import TrainJob, plan, planned_job_manifest, trainjob_manifest

from trainop_core.api.types import CleanPodPolicy, RestartPolicy, RunPolicy
from trainop_core.errors import InvalidJobError

CONTAINER = Container(image="img:1", command=["python"], args=["train.py"])
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("config", "kind", "replicas"),
    [
        (PyTorch(workers=2), "PyTorchJob", {"Master": 1, "Worker": 2}),
        (PyTorch(workers=3, master=False), "PyTorchJob", {"Worker": 3}),
        (TensorFlow(workers=2, chief=True, ps=1), "TFJob", {"Chief": 1, "PS": 1, "Worker": 2}),
        (XGBoost(workers=2), "XGBoostJob", {"Master": 1, "Worker": 2}),
        (Paddle(workers=2), "PaddleJob", {"Worker": 2}),
        (Paddle(workers=2, master=True), "PaddleJob", {"Master": 1, "Worker": 2}),
        (MPI(workers=2, slots=2), "MPIJob", {"Launcher": 1, "Worker": 2}),
        (MXNet(workers=2, servers=1), "MXJob", {"Scheduler": 1, "Server": 1, "Worker": 2}),
        (TrainingJob(kind="MXNetJob", replicas={"worker": 1}), "MXJob", {"Worker": 1}),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_short_constructors_fill_the_generic_config(
    config: TrainingJob, kind: str, replicas: dict[str, int]
) -> None:
    job = build_job(config, CONTAINER)

    assert job.kind == kind
    assert {r: spec.replicas for r, spec in job.spec.replica_specs.items()} == replicas


def test_per_replica_settings_and_the_cores_policies_reach_the_job() -> None:
    config = PyTorch(
        workers=2,
        worker=Replica(
            image="worker:2",
            requests=Resources(cpu="1", mem="1Gi"),
            limits=Resources(gpu="1"),
            restart_policy=RestartPolicy.EXIT_CODE,
        ),
        run_policy=RunPolicy(clean_pod_policy=CleanPodPolicy.ALL, backoff_limit=2),
        nproc_per_node=4,
    )
    job = build_job(config, CONTAINER)

    worker = job.spec.replica_specs["Worker"]
    (container,) = worker.template["spec"]["containers"]
    assert container["image"] == "worker:2"
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert worker.restart_policy is RestartPolicy.EXIT_CODE
    assert job.spec.run_policy.clean_pod_policy is CleanPodPolicy.ALL
    assert job.spec.nproc_per_node == "4"  # type: ignore[attr-defined] # PyTorchJobSpec
    master = job.spec.replica_specs["Master"].template["spec"]["containers"][0]
    assert master["image"] == "img:1" and master["name"] == "pytorch"


def test_the_core_rejects_options_the_kind_does_not_have_naming_the_field() -> None:
    with pytest.raises(InvalidJobError, match=r"spec\.nprocPerNode: unknown field"):
        build_job(TensorFlow(workers=1, nproc_per_node=2), CONTAINER)


def test_the_core_reports_bad_counts_with_their_wire_path() -> None:
    with pytest.raises(InvalidJobError, match=r"spec\.tfReplicaSpecs\.Worker\.replicas"):
        build_job(TrainingJob(kind="TFJob", replicas={"Worker": -1}), CONTAINER)


def test_a_bad_config_fails_when_the_task_is_defined() -> None:
    with pytest.raises(InvalidJobError, match="unknown kind"):

        @task(task_config=TrainingJob(kind="SparkJob", replicas={"Worker": 1}))
        def train() -> None: ...


def test_compat_mode_refuses_kinds_and_options_flyte_cannot_express() -> None:
    with pytest.raises(CompatError, match="not XGBoostJob"):

        @task(task_config=XGBoost(workers=1, compat=True))
        def xgb() -> None: ...

    with pytest.raises(CompatError, match="success_policy"):
        from trainop_flyte import compat

        config = TensorFlow(workers=1, compat=True, success_policy="AllWorkers")
        compat.custom(config, build_job(config, CONTAINER))


def test_the_manifest_leaves_namespace_to_flyte_unless_the_config_sets_one() -> None:
    assert "namespace" not in job_manifest(PyTorch(), CONTAINER)["metadata"]
    pinned = job_manifest(PyTorch(namespace="training"), CONTAINER)
    assert pinned["metadata"]["namespace"] == "training"


def test_a_trainjob_config_is_a_trainjob_naming_its_runtime_and_what_the_author_chose() -> None:
    config = TrainJob(
        runtime="torch-distributed",
        num_nodes=2,
        num_proc_per_node=2,
        requests=Resources(cpu="1", mem="1Gi"),
        env={"STEPS": "3"},
    )
    manifest = trainjob_manifest(config, CONTAINER, name="t")
    assert manifest["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert manifest["spec"] == {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {
            "image": "img:1",
            "command": ["python"],
            "args": ["train.py"],
            "env": [{"name": "STEPS", "value": "3"}],
            "numNodes": 2,
            "numProcPerNode": 2,
            "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
        },
    }
    planned = plan(config, CONTAINER)
    assert (planned.kind, planned.spec.ml_policy, planned.spec.num_proc_per_node) == (
        "TrainJob",
        "torch",
        2,
    )
    assert [spec.replicas for spec in planned.spec.replica_specs.values()] == [2]


@pytest.mark.parametrize(
    ("config", "path"),
    [
        (TrainJob(num_nodes=0), "spec.trainer.numNodes"),
        (TrainJob(runtime="no-such-runtime"), "spec.runtimeRef.name"),
    ],
    ids=["no nodes", "a runtime trainop does not find"],
)
def test_a_bad_trainjob_config_fails_when_the_task_is_defined_naming_the_field(
    config: TrainJob, path: str
) -> None:
    with pytest.raises(InvalidJobError) as refused:

        @task(task_config=config)
        def train() -> None: ...

    assert path in {problem.path for problem in refused.value.problems}


@pytest.mark.parametrize(
    ("runtime", "program"),
    [
        ("torch-distributed", ["torchrun", "--no-python", "pyflyte-execute", "--x"]),
        ("xgboost-distributed", ["pyflyte-execute", "--x"]),
    ],
    ids=["torch runs the function under torchrun", "xgboost runs it as it is"],
)
def test_a_trainjob_policys_launcher_starts_the_function_on_each_node(
    runtime: str, program: list[str]
) -> None:
    manifest = planned_job_manifest(TrainJob(runtime=runtime), CONTAINER, name="")
    assert manifest["metadata"]["name"] == ""  # the connector names each attempt's job
    run_container(manifest, Container(image="img:2", args=["pyflyte-execute", "--x"]))
    (spec,) = manifest["spec"]["replicaSpecs"].values()
    (node,) = spec["template"]["spec"]["containers"]
    assert [*node["command"], *node["args"]] == program


def test_the_public_api_is_listed_once() -> None:
    assert sorted(trainop_flyte.__all__) == [
        "CleanPodPolicy",
        "MPI",
        "MXNet",
        "Paddle",
        "PyTorch",
        "Replica",
        "RestartPolicy",
        "RunPolicy",
        "TensorFlow",
        "TrainJob",
        "TrainingJob",
        "TrainingJobCommandTask",
        "TrainingJobConnector",
        "TrainingJobFailed",
        "TrainingJobFunctionTask",
        "XGBoost",
    ]
    assert trainop_flyte.RunPolicy is RunPolicy  # the core's type, not a copy


def test_importing_the_core_does_not_import_flytekit() -> None:
    code = (
        "import sys, trainop_core, trainop_core.client, trainop_core.api.validation; "
        "assert 'flytekit' not in sys.modules and 'trainop_flyte' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
