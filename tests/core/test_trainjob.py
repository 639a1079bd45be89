"""Kubeflow Trainer v2's TrainJob and runtimes: validation naming the field, translation to the
planned job, every ML policy's env contract, and the pods the Kubeflow SDK can read. No I/O."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from builders import make_trainjob

from trainop_core.api import trainjob as v2
from trainop_core.api.load import Document
from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.errors import InvalidJobError
from trainop_core.planner import KubernetesAddressing, Observed, plan
from trainop_core.runtimes import policies
from trainop_core.runtimes.catalog import DEFAULTS_DIR, default_catalog, load_catalog
from trainop_core.runtimes.kind import KIND
from trainop_core.runtimes.policies.table import builtin_policies
from trainop_core.runtimes.prepare import prepare_trainjob

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def trainjob(runtime: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    return make_trainjob("tj", runtime, "team", **spec)


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidJobError) as caught:
        parse_v2(data)
    return {p.path: p.message for p in caught.value.problems}


BAD_TRAINJOBS = [
    ("spec.runtimeRef.kind", {"runtimeRef": {"name": "r", "kind": "Runtime"}}, "expected one of"),
    ("spec.runtimeRef.apiGroup", {"runtimeRef": {"name": "r", "apiGroup": "x.io"}}, "expected"),
    ("spec.trainer.numNodes", {"trainer": {"numNodes": 0}}, "at least 1"),
    ("spec.trainer.numProcPerNode", {"trainer": {"numProcPerNode": "4"}}, "an integer"),
    ("spec.trainer.env[0].value", {"trainer": {"env": [{"name": "A", "value": 1}]}}, "a string"),
    (
        "spec.trainer.resourcesPerNode.limits.cpu",
        {"trainer": {"resourcesPerNode": {"limits": {"cpu": "lots"}}}},
        "quantity",
    ),  # reason: one case per line reads best
    ("spec.managedBy", {"managedBy": "someone"}, "expected one of"),
    ("spec.activeDeadlineSeconds", {"activeDeadlineSeconds": 0}, "an integer >= 1"),
    ("spec.suspend", {"suspend": "yes"}, "true or false"),
    ("spec.trainer.cmd", {"trainer": {"cmd": ["x"]}}, "unknown field"),
    ("spec.initializer", {"initializer": {"dataset": {"storageUri": "hf://d"}}}, "not supported"),
]


@pytest.mark.parametrize(
    ("path", "spec", "says"), BAD_TRAINJOBS, ids=[f"{c[0]} is refused" for c in BAD_TRAINJOBS]
)
def test_a_bad_trainjob_field_is_named(path: str, spec: dict[str, Any], says: str) -> None:
    data = trainjob(**spec)
    if "runtimeRef" in spec:
        data["spec"]["runtimeRef"] = spec["runtimeRef"]
    found = problems_of(data)
    assert path in found and says in found[path], found


def patch(pod_spec: dict[str, Any], job: str = "node", manager: str = "kueue.x-k8s.io/manager"):
    pod = {"spec": {"template": {"spec": pod_spec}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": job, "template": pod}]}}
        },
    }


PATCH_PATH = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
POD_PATH = f"{PATCH_PATH}.template.spec.template.spec"
BAD_PATCHES = [
    (f"{POD_PATH}.hostNetwork", {"hostNetwork": True}, "may not be patched"),
    (f"{POD_PATH}.nodeSelector.zone", {"nodeSelector": {"zone": 1}}, "a string"),
    (
        f"{POD_PATH}.containers[0].env",
        {"containers": [{"name": "node", "env": [{"name": "A", "value": "b"}]}]},
        "spec.trainer.env",
    ),
    (
        f"{POD_PATH}.containers[0].image",
        {"containers": [{"name": "sidecar", "image": "evil"}]},
        "may not be patched",
    ),
]


@pytest.mark.parametrize(
    ("path", "pod_spec", "says"), BAD_PATCHES, ids=[c[0].rsplit(".", 1)[-1] for c in BAD_PATCHES]
)
def test_a_runtime_patch_may_change_only_trainers_pod_spec_subset(
    path: str, pod_spec: dict[str, Any], says: str
) -> None:
    found = problems_of(trainjob(runtimePatches=[patch(pod_spec)]))
    assert path in found and says in found[path], found


def test_two_patches_of_one_manager_are_refused() -> None:
    found = problems_of(trainjob(runtimePatches=[patch({}), patch({})]))
    assert "has more than one patch" in found["spec.runtimePatches[1].manager"]


def runtime(**ml_policy: Any) -> dict[str, Any]:
    torch = next(r for r in default_catalog().runtimes if r.name == "torch-distributed")
    data = torch.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["spec"]["mlPolicy"] = {"numNodes": 1, **ml_policy}
    return data


@pytest.mark.parametrize(
    ("ml_policy", "path", "says"),
    [
        ({"torch": {}, "jax": {}}, "spec.mlPolicy", "at most one"),
        ({"flux": {}}, "spec.mlPolicy.flux", "not supported"),
        ({"numNodes": 0}, "spec.mlPolicy.numNodes", "at least 1"),
    ],
    ids=["two ML policies", "flux is not supported yet", "zero nodes"],
)
def test_a_bad_runtime_field_is_named(ml_policy: dict[str, Any], path: str, says: str) -> None:
    found = problems_of(runtime(**ml_policy))
    assert path in found and says in found[path], found


@pytest.mark.parametrize(
    ("name", "valid"),
    [("torchtune-llama3.2-1b", True), ("site.torch", True), ("Torch_2", False), ("a..b", False)],
)
def test_a_runtime_may_have_any_object_name_as_trainers_do(name: str, valid: bool) -> None:
    data = runtime(torch={})
    data["metadata"]["name"] = name
    if valid:
        parse_v2(data)
    else:
        assert "not a valid DNS subdomain" in problems_of(data)["metadata.name"]


def test_a_runtime_without_a_trainer_step_is_refused() -> None:
    data = runtime(torch={})
    data["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "trainer"
    del data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"]
    found = problems_of(data)
    assert "exactly one replicated job" in found["spec.template.spec.replicatedJobs"]


def test_the_default_runtimes_are_valid_and_labelled_for_the_sdk() -> None:
    catalog = default_catalog()
    names = {r.name: r.framework for r in catalog.runtimes}
    assert names == {
        "jax-distributed": "jax",
        "mpi-distributed": "mpi",
        "torch-distributed": "torch",
        "xgboost-distributed": "xgboost",
    }  # reason: the whole table at once
    assert all(r.kind == v2.CLUSTER_TRAINING_RUNTIME for r in catalog.runtimes)


def test_an_unknown_runtime_is_named_with_the_known_ones() -> None:
    with pytest.raises(InvalidJobError) as caught:
        prepare_trainjob(Document(trainjob("torch-nope"), "tj.yaml"))
    (problem,) = caught.value.problems
    assert problem.path == "spec.runtimeRef.name"
    assert "torch-distributed" in problem.message and caught.value.source == "tj.yaml"


def test_a_namespaced_runtime_is_found_only_in_its_namespace(tmp_path: Path) -> None:
    data = runtime(torch={})
    data["kind"], data["metadata"]["namespace"] = "TrainingRuntime", "team"
    (tmp_path / "mine.yaml").write_text(json.dumps(data))
    catalog = load_catalog([tmp_path])
    ref = {"name": data["metadata"]["name"], "kind": "TrainingRuntime"}
    _, planned = prepare_trainjob(Document(trainjob(runtimeRef=ref), ""), catalog)
    assert planned.spec.ml_policy == "torch"
    elsewhere = trainjob(runtimeRef=ref)
    elsewhere["metadata"]["namespace"] = "other"
    with pytest.raises(InvalidJobError, match="no TrainingRuntime named"):
        prepare_trainjob(Document(elsewhere, ""), catalog)


# --- translation and planning --------------------------------------------------------------------


def first_pods(data: dict[str, Any]) -> list[dict[str, Any]]:
    kind, job = prepare_trainjob(Document(data, ""))
    job.metadata.uid = "uid-1"
    first = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind))
    return first.create_pods


def env_of(pod: dict[str, Any], container: str = "node") -> dict[str, str]:
    main = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", "") for e in main.get("env") or []}


CONTRACTS = {
    "torch-distributed": {
        "PET_NNODES": "3",
        "PET_NPROC_PER_NODE": "2",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "tj-node-0",
        "PET_MASTER_PORT": "29500",
    },
    "xgboost-distributed": {
        "DMLC_TRACKER_URI": "tj-node-0",
        "DMLC_TRACKER_PORT": "9999",
        "DMLC_TASK_ID": "2",
        "DMLC_NUM_WORKER": "3",
    },
    "jax-distributed": {
        "JAX_COORDINATOR_ADDRESS": "tj-node-0:6666",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": "2",
    },
}


@pytest.mark.parametrize("name", sorted(CONTRACTS), ids=lambda n: f"{n} gives node 2 its contract")
def test_each_ml_policy_sets_its_env_contract(name: str) -> None:
    pods = first_pods(trainjob(name, trainer={"numNodes": 3, "numProcPerNode": 2}))
    assert [p["metadata"]["name"] for p in pods] == ["tj-node-0", "tj-node-1", "tj-node-2"]
    env = env_of(pods[2])
    assert {k: env.get(k) for k in CONTRACTS[name]} == CONTRACTS[name]


def test_pods_carry_the_labels_the_kubeflow_sdk_selects_and_reads() -> None:
    # kubeflow 0.5.0, trainer/backends/kubernetes/backend.py (__get_trainjob_from_cr): pods are
    # listed by jobset-name and replicatedjob-name, the step is node-<job-completion-index>, and
    # get_trainjob_node_step reads the container named "node".
    pods = first_pods(trainjob(trainer={"numNodes": 2}))
    for index, pod in enumerate(pods):
        labels = pod["metadata"]["labels"]
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "tj"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert labels["batch.kubernetes.io/job-completion-index"] == str(index)
        assert labels[v2.ANCESTOR_LABEL] == v2.TRAINER_STEP
        assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]


def test_the_trainer_overrides_the_node_container() -> None:
    spec = {
        "trainer": {
            "image": "me/train:1",
            "command": ["python", "train.py"],
            "args": ["--lr", "0.1"],
            "env": [{"name": "A", "value": "1"}],
            "resourcesPerNode": {"limits": {"cpu": "2"}},
        }
    }
    (pod,) = first_pods(trainjob(**spec))
    (node,) = pod["spec"]["containers"]
    assert (node["image"], node["command"], node["args"]) == (
        "me/train:1",
        ["python", "train.py"],
        ["--lr", "0.1"],
    )
    assert node["resources"] == {"limits": {"cpu": "2"}} and env_of(pod)["A"] == "1"


def test_runtime_patches_reach_the_pods_in_order() -> None:
    kueue = patch(
        {
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        }
    )
    kueue["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["metadata"] = {"labels": {"kueue.x-k8s.io/podset": "node"}}
    mine = patch({"nodeSelector": {"zone": "b"}, "serviceAccountName": "trainer"}, manager="me")
    other_step = patch({"nodeSelector": {"ignored": "yes"}}, job="launcher", manager="x")
    (pod,) = first_pods(trainjob(runtimePatches=[kueue, mine, other_step]))
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"zone": "b"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert spec["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert spec["serviceAccountName"] == "trainer"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"suspend": True}, {"suspend": True}),
        ({"activeDeadlineSeconds": 60}, {"activeDeadlineSeconds": 60}),
        ({"managedBy": v2.MANAGED_BY_MULTIKUEUE}, {"managedBy": v2.MANAGED_BY_MULTIKUEUE}),
    ],
    ids=["suspend", "activeDeadlineSeconds", "managedBy MultiKueue"],
)
def test_lifecycle_fields_become_the_run_policy(
    spec: dict[str, Any], expected: dict[str, Any]
) -> None:
    _, job = prepare_trainjob(Document(trainjob(**spec), ""))
    run_policy = job.spec.run_policy.to_dict()
    assert {k: run_policy.get(k) for k in expected} == expected


def test_a_multikueue_trainjob_gets_no_pods_here() -> None:
    assert first_pods(trainjob(managedBy=v2.MANAGED_BY_MULTIKUEUE)) == []


def test_pod_group_policy_asks_for_a_gang_of_every_node(tmp_path: Path) -> None:
    data = runtime(torch={})
    data["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    (tmp_path / "gang.yaml").write_text(json.dumps(data))
    _, job = prepare_trainjob(Document(trainjob(trainer={"numNodes": 4}), ""), tmp_path)
    gang = job.spec.run_policy.scheduling_policy
    assert gang is not None and (gang.min_available, gang.schedule_timeout_seconds) == (4, 120)


def test_translation_leaves_the_runtime_untouched() -> None:
    catalog = default_catalog()
    before = copy.deepcopy([r.model_dump() for r in catalog.runtimes])
    prepare_trainjob(
        Document(trainjob(trainer={"env": [{"name": "X", "value": "1"}]}), ""), catalog
    )
    assert [r.model_dump() for r in catalog.runtimes] == before


# --- adding a policy is as small as adding a kind ------------------------------------------------


@pytest.mark.parametrize("name", sorted(builtin_policies()), ids=lambda n: f"the {n} policy")
def test_an_ml_policy_module_is_small(name: str) -> None:
    module = Path(policies.__file__).parent / f"{name}.py"
    assert len(module.read_text().splitlines()) < 40


def test_the_internal_kind_serves_no_v1_resource() -> None:
    from trainop_core.kinds.table import build_registry

    assert KIND.kind not in build_registry(entry_points=False)
    assert sorted(p.name for p in DEFAULTS_DIR.glob("*.yaml")) == [
        "jax-distributed.yaml",
        "mpi-distributed.yaml",
        "torch-distributed.yaml",
        "xgboost-distributed.yaml",
    ]


# --- status in Trainer's terms -------------------------------------------------------------------


def finished_with(kind_of_end: str, message: str = "") -> Any:
    from trainop_core.api.types import ConditionStatus, ConditionType, JobCondition, JobStatus

    _, job = prepare_trainjob(Document(trainjob(), ""))
    when = {"last_transition_time": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)}
    conditions = [JobCondition(type=ConditionType.RUNNING, status=ConditionStatus.TRUE, **when)]
    conditions.append(
        JobCondition(
            type=ConditionType(kind_of_end),
            status=ConditionStatus.TRUE,
            reason=f"TrainJob{kind_of_end}",  # the planner's `<Kind><Reason>`
            message=message,
            **when,
        )
    )
    job.status = JobStatus(conditions=conditions)
    return job


@pytest.mark.parametrize(
    ("end", "message", "condition", "reason", "trainer_message"),
    [
        ("Succeeded", "", "Complete", "AllJobsCompleted", "jobset completed successfully"),
        (
            "Failed",
            "1 Node replica(s) failed.",
            "Failed",
            "FailedJobs",
            "jobset failed due to one or more job failures (first failed job: tj-node-0)",
        ),
        (
            "Failed",
            "Job tj has failed because it was active longer than specified deadline",
            "Failed",
            "DeadlineExceeded",
            "TrainJob exceeded its active deadline",
        ),
        ("Suspended", "", "Suspended", "Suspended", "TrainJob is suspended"),
    ],
    ids=["success is Complete", "a failure is Failed", "the deadline", "suspended"],
)
def test_status_reads_as_trainers(
    end: str, message: str, condition: str, reason: str, trainer_message: str
) -> None:
    """Reasons and messages are Trainer v2.3.0's (its own, and those it copies from JobSet)."""
    from trainop_core.runtimes.status import trainjob_state, trainjob_status

    job = finished_with(end, message)
    status = trainjob_status(job)
    assert [(c.type, c.status, c.reason, c.message) for c in status.conditions] == [
        (condition, "True", reason, trainer_message)
    ]
    assert trainjob_state(job) == condition
    assert status.jobs_status is not None and status.jobs_status[0].name == "node"


def test_a_resumed_job_reads_as_trainers_resumed() -> None:
    from trainop_core.api.types import ConditionStatus, ConditionType, JobCondition
    from trainop_core.runtimes.status import trainjob_status

    job = finished_with("Running")
    assert job.status is not None
    job.status.conditions.append(
        JobCondition(
            type=ConditionType.SUSPENDED,
            status=ConditionStatus.FALSE,
            reason="TrainJobResumed",
            last_transition_time=datetime(2026, 1, 2, 3, 4, 6, tzinfo=timezone.utc),
        )
    )
    status = trainjob_status(job)
    assert [(c.type, c.status, c.reason, c.message) for c in status.conditions] == [
        ("Suspended", "False", "Resumed", "TrainJob is resumed")
    ]


def test_a_failure_trainer_never_records_keeps_trainops_reason_and_message() -> None:
    from trainop_core.runtimes.status import trainjob_status

    job = finished_with("Failed", "refused by the decorator server; no pod was created")
    assert job.status is not None
    job.status.conditions[-1].reason = "TrainJobFailedDecoration"
    (failed,) = trainjob_status(job).conditions
    assert (failed.reason, failed.message) == (
        "TrainJobFailedDecoration",
        "refused by the decorator server; no pod was created",
    )


def test_a_failed_launcher_is_the_first_failed_job() -> None:
    from trainop_core.api.types import ReplicaStatus
    from trainop_core.runtimes.status import trainjob_status

    job = finished_with("Failed", "launcher failed")
    assert job.status is not None
    job.status.replica_statuses = {"Launcher": ReplicaStatus(failed=1), "Node": ReplicaStatus()}
    (failed,) = trainjob_status(job).conditions
    assert failed.message.endswith("(first failed job: tj-launcher-0)")


# --- the CLI -------------------------------------------------------------------------------------


def test_trainop_runtimes_lists_the_defaults_and_a_named_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainop_core.cli.main import main

    data = runtime(torch={})
    data["metadata"]["name"] = "site-torch"
    (tmp_path / "site.yaml").write_text(json.dumps(data))
    assert main(["runtimes", "--runtimes", str(tmp_path)]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [
        ["site-torch", "ClusterTrainingRuntime"],
        ["jax-distributed", "ClusterTrainingRuntime"],
        ["mpi-distributed", "ClusterTrainingRuntime"],
        ["torch-distributed", "ClusterTrainingRuntime"],
        ["xgboost-distributed", "ClusterTrainingRuntime"],
    ]


def test_trainop_runtimes_yaml_is_what_kubectl_applies(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from trainop_core.cli.main import main

    assert main(["runtimes", "-o", "yaml"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [parse_v2(d).name for d in docs] == [r.name for r in default_catalog().runtimes]


def test_a_bad_runtime_file_names_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainop_core.cli.main import main

    data = runtime(torch={}, numNodes=-1)
    (tmp_path / "bad.yaml").write_text(json.dumps(data))
    assert main(["runtimes", "--runtimes", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "spec.mlPolicy.numNodes: must be at least 1" in err


@pytest.mark.parametrize("command", ["render", "validate"])
def test_a_runtime_file_too_large_is_blamed_on_the_file_not_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    from trainop_core.cli.main import main

    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    (runtimes / "big.yaml").write_text(json.dumps(runtime(torch={}, pad="x" * (4 * 2**20))))
    (tmp_path / "tj.yaml").write_text(json.dumps(trainjob()))
    assert main([command, str(tmp_path / "tj.yaml"), "--runtimes", str(runtimes)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{runtimes / 'big.yaml'}: is larger than 3 MiB"), err
    assert "tj.yaml" not in err


def test_pods_and_services_are_owned_by_the_trainjob() -> None:
    kind, job = prepare_trainjob(Document(trainjob(), ""))
    job.metadata.uid = "uid-1"
    first = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind))
    for obj in [*first.create_pods, *first.create_services]:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["uid"]) == (
            v2.API_VERSION,
            "TrainJob",
            "uid-1",
        )


def test_a_runtime_in_trainers_earlier_shape_runs_its_torch_process_count(tmp_path: Path) -> None:
    data = runtime(torch={"numProcPerNode": "auto"})  # as Trainer v2.0/v2.1's torch-distributed
    (tmp_path / "upstream.yaml").write_text(json.dumps(data))
    gpus = {"limits": {"nvidia.com/gpu": 2}}
    written = trainjob(trainer={"numNodes": 2, "resourcesPerNode": gpus})
    _, job = prepare_trainjob(Document(written, ""), tmp_path)
    kind = KIND
    job.metadata.uid = "uid-1"
    first = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind))
    assert env_of(first.create_pods[1])["PET_NPROC_PER_NODE"] == "2"  # "auto": one per GPU
    (tmp_path / "upstream.yaml").write_text(json.dumps(runtime(torch={"numProcPerNode": 4})))
    _, job = prepare_trainjob(Document(trainjob(), ""), tmp_path)
    assert job.spec.num_proc_per_node == 4  # the runtime's count
    mine = trainjob(trainer={"numProcPerNode": 3})
    _, job = prepare_trainjob(Document(mine, ""), tmp_path)
    assert job.spec.num_proc_per_node == 3  # the TrainJob's count wins


@pytest.mark.parametrize(
    ("torch", "path"),
    [
        ({"numProcPerNode": "many"}, "spec.mlPolicy.torch.numProcPerNode"),
        ({"numProcPerNode": 0}, "spec.mlPolicy.torch.numProcPerNode"),
        ({"envInjection": {"targets": []}}, "spec.mlPolicy.torch.envInjection"),
    ],
    ids=["a word other than auto", "zero processes", "envInjection is not supported"],
)
def test_a_bad_torch_policy_is_named(torch: dict[str, Any], path: str) -> None:
    assert path in problems_of(runtime(torch=torch))


def test_trainop_validate_checks_a_trainjob_with_its_runtime_and_a_runtime_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainop_core.cli.main import main

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(json.dumps(trainjob()))
    bad.write_text(json.dumps(trainjob("torch-nope")))
    runtime_file = DEFAULTS_DIR / "torch-distributed.yaml"
    assert main(["validate", str(good), str(runtime_file)]) == 0
    out = capsys.readouterr().out
    assert "TrainJob/tj: valid" in out and "ClusterTrainingRuntime/torch-distributed: valid" in out
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}: TrainJob/tj: spec.runtimeRef.name: no ClusterTrainingRuntime" in (
        capsys.readouterr().err
    )


def test_the_kubernetes_client_backend_refuses_a_bad_or_planned_trainjob_before_any_request() -> (
    None
):
    """A TrainJob is stored as written there (tests/kubernetes_backend); one that is invalid in
    itself, or already planned with runtimes found elsewhere, is refused without a request."""
    pytest.importorskip("kubernetes")
    from kubernetes import client as k8s_client

    from trainop_core.backends.kubernetes.backend import KubernetesBackend
    from trainop_core.client import TrainingClient, prepare_source
    from trainop_core.runtimes.kind import PlannedTrainJob
    from trainop_core.runtimes.prepare import planned_manifest

    # No server listens there: the refusal must come before any request is made.
    api = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
    client = TrainingClient(KubernetesBackend(api_client=api, namespace="team"))
    with pytest.raises(InvalidJobError, match=r"TrainJob/tj: spec\.trainer\.numNodes"):
        client.create(trainjob(trainer={"numNodes": 0}))
    _, planned, _ = prepare_source(trainjob())
    assert isinstance(planned, PlannedTrainJob)
    with pytest.raises(InvalidJobError, match="pass the TrainJob itself"):
        client.create(planned_manifest(planned))  # what Flyte's connector carries


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ((), ([], False)),
        (("TrainJob",), ([], True)),
        (("pytorchjob", "trainjob"), (["pytorchjob"], True)),
    ],
    ids=["none: every v1 kind, no TrainJob", "TrainJob alone", "case-insensitive, with a v1 kind"],
)
def test_trainjob_is_an_opt_in_scheme(names: tuple[str, ...], expected: Any) -> None:
    from trainop_core.runtimes.kind import split_schemes

    assert split_schemes(names) == expected


RENDER_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"


@pytest.mark.parametrize(
    "runtime_name",
    ["torch-distributed", "xgboost-distributed", "jax-distributed", "mpi-distributed"],
    ids=lambda n: f"a TrainJob on {n} renders as its golden",
)
def test_a_rendered_trainjob_matches_its_golden_file(
    runtime_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the operator creates for a 2-node TrainJob (TRAINOP_UPDATE_GOLDEN=1 regenerates)."""
    import os

    from trainop_core.cli.main import main

    source = tmp_path / "tj.yaml"
    spec = {"trainer": {"numNodes": 2, "numProcPerNode": 2, "command": ["python", "train.py"]}}
    source.write_text(json.dumps(trainjob(runtime_name, **spec)))
    assert main(["render", str(source)]) == 0
    rendered = capsys.readouterr().out
    golden = RENDER_GOLDEN / f"trainjob-{runtime_name}.yaml"
    if os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert rendered == golden.read_text()


def test_a_new_runtime_enqueues_exactly_the_trainjobs_that_name_it() -> None:
    from trainop_core.runtimes.operator import RuntimeHandler

    def job(name: str, namespace: str, ref: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace}, "spec": {"runtimeRef": ref}}

    jobs = [
        job("a", "team", {"name": "late"}),  # ClusterTrainingRuntime by default
        job("b", "team", {"name": "other"}),
        job("c", "team", {"name": "late", "kind": "TrainingRuntime"}),
        job("d", "elsewhere", {"name": "late", "kind": "TrainingRuntime"}),
    ]

    class Controller:
        def __init__(self) -> None:
            self.jobs = self
            self.enqueued: list[str] = []

        def list(self) -> list[dict[str, Any]]:
            return jobs

        def enqueue(self, obj: dict[str, Any]) -> None:
            self.enqueued.append(obj["metadata"]["name"])

    controller = Controller()
    handler = RuntimeHandler(controller)  # type: ignore[arg-type]  # reason: a fake controller
    handler.on_add({"kind": "ClusterTrainingRuntime", "metadata": {"name": "late"}})
    assert controller.enqueued == ["a"]
    controller.enqueued.clear()
    namespaced = {"kind": "TrainingRuntime", "metadata": {"name": "late", "namespace": "team"}}
    handler.on_update(namespaced, namespaced)
    assert controller.enqueued == ["c"]
