"""A TrainJob's problems name the TrainJob's own fields (or its runtime's), never the planned
job's (`spec.replicaSpecs`, `spec.runPolicy`), in `trainop validate`, the admission webhook and
the local backend's create; each hostile value is refused in bounded time, before anything is
planned or started for it (issue 33.3)."""

from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_trainjob

from trainop_core.api.load import Document
from trainop_core.backends.local import LocalBackend
from trainop_core.cli import main
from trainop_core.client import TrainingClient
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB
from trainop_core.operator.webhook.review import validate_v2
from trainop_core.runtimes.catalog import default_catalog
from trainop_core.runtimes.origins import RUNTIME_FIELD
from trainop_core.runtimes.prepare import prepare_trainjob

PLANNED = ("replicaSpecs", "runPolicy")
GOOD_TRAINER = {"numNodes": 2, "command": ["python", "-c", "pass"]}


def trainer(**fields: Any) -> dict[str, Any]:
    return make_trainjob("tj", trainer={**GOOD_TRAINER, **fields})


def with_spec(**spec: Any) -> dict[str, Any]:
    job = trainer()
    job["spec"].update(spec)
    return job


def with_runtime_name(name: str) -> dict[str, Any]:
    job = trainer()
    job["spec"]["runtimeRef"]["name"] = name
    return job


def patched_volumes(*names: str) -> dict[str, Any]:
    volumes = [{"name": n, "emptyDir": {}} for n in names]
    pod = {"spec": {"template": {"spec": {"volumes": volumes}}}}
    patch = {
        "manager": "example.com/volumes",
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": pod}]}}
        },
    }
    return with_spec(runtimePatches=[patch])


# (case, TrainJob, the path its problem names, whether a valid TrainJob for the API server:
# then only a backend that cannot run it refuses it)
HOSTILE: list[tuple[str, dict[str, Any], str, bool]] = [
    ("numNodes 0", trainer(numNodes=0), "spec.trainer.numNodes", False),
    ("numNodes -1", trainer(numNodes=-1), "spec.trainer.numNodes", False),
    ("numNodes 10^9", trainer(numNodes=10**9), "spec.trainer.numNodes", True),
    ("numNodes 2^31", trainer(numNodes=2**31), "spec.trainer.numNodes", False),
    ("numNodes 2^63", trainer(numNodes=2**63), "spec.trainer.numNodes", False),
    ("numNodes a string", trainer(numNodes="3"), "spec.trainer.numNodes", False),
    ("numNodes a float", trainer(numNodes=1e9), "spec.trainer.numNodes", False),
    ("numProcPerNode 0", trainer(numProcPerNode=0), "spec.trainer.numProcPerNode", False),
    ("numProcPerNode 2^40", trainer(numProcPerNode=2**40), "spec.trainer.numProcPerNode", False),
    (
        "resourcesPerNode 1e400 CPUs",
        trainer(resourcesPerNode={"limits": {"cpu": "1e400"}}),
        "spec.trainer.resourcesPerNode.limits.cpu",
        False,
    ),
    (
        "resourcesPerNode 10^29 Ei of memory",
        trainer(resourcesPerNode={"requests": {"memory": "9" * 29 + "Ei"}}),
        "spec.trainer.resourcesPerNode.requests.memory",
        False,
    ),
    (
        "resourcesPerNode 2^64 GPUs",
        trainer(resourcesPerNode={"limits": {"nvidia.com/gpu": 2**64}}),
        "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]",
        False,
    ),
    (
        "an env name with '='",
        trainer(env=[{"name": "A=B", "value": "x"}]),
        "spec.trainer.env[0].name",
        False,
    ),
    (
        "an env name with a NUL",
        trainer(env=[{"name": "A\0", "value": "x"}]),
        "spec.trainer.env[0].name",
        False,
    ),
    (
        "an env name given twice",
        trainer(env=[{"name": "A", "value": "x"}, {"name": "A", "value": "y"}]),
        "spec.trainer.env[1].name",
        False,
    ),
    (
        "a 100 KiB env name with '='",
        trainer(env=[{"name": "=" * 100_000, "value": "x"}]),
        "spec.trainer.env[0].name",
        False,
    ),
    (
        "an env value with a NUL",
        trainer(env=[{"name": "A", "value": "x\0y"}]),
        "spec.trainer.env[0].value",
        False,
    ),
    ("an image of 600 characters", trainer(image="i" * 600), "spec.trainer.image", False),
    ("an image of binary", trainer(image="\0\x01\x7f"), "spec.trainer.image", False),
    ("an image with spaces", trainer(image=" python "), "spec.trainer.image", False),
    ("a command with a NUL", trainer(command=["python\0"]), "spec.trainer.command[0]", False),
    ("a command of 200 words", trainer(command=["x"] * 200), "spec.trainer.command", False),
    ("args of 200 words", trainer(args=["x"] * 200), "spec.trainer.args", False),
    ("an empty command", trainer(command=[]), "spec.trainer.command", True),
    (
        "an activeDeadlineSeconds of 2^64",
        with_spec(activeDeadlineSeconds=2**64),
        "spec.activeDeadlineSeconds",
        False,
    ),
    ("a runtimeRef name of 300", with_runtime_name("r" * 300), "spec.runtimeRef.name", False),
    ("a runtimeRef path", with_runtime_name("../../etc/passwd"), "spec.runtimeRef.name", False),
    ("a runtimeRef with a NUL", with_runtime_name("torch\0"), "spec.runtimeRef.name", False),
    (
        "a patch's two volumes of one name",
        patched_volumes("data", "data"),
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template"
        ".spec.template.spec.volumes[1].name",
        False,
    ),
]
IDS = [f"{case} is named by its own field" for case, *_ in HOSTILE]


def assert_named(problems: list[Problem] | list[tuple[str, str]], path: str) -> None:
    pairs = [(p.path, p.message) if isinstance(p, Problem) else p for p in problems]
    assert path in {field for field, _ in pairs}, pairs
    for field, message in pairs:
        assert not any(word in f"{field} {message}" for word in PLANNED), pairs


def timed(action: Callable[[], Any]) -> Any:
    """`action`'s result; it must not take long (10^9 nodes must never be listed one by one)."""
    start = time.monotonic()
    result = action()
    assert time.monotonic() - start < 60, "bounded: nothing is planned per replica"
    return result


@pytest.mark.parametrize(("case", "job", "path", "valid"), HOSTILE, ids=IDS)
def test_trainop_validate_names_the_trainjobs_field(
    case: str, job: dict[str, Any], path: str, valid: bool, tmp_path: Path
) -> None:
    source = tmp_path / "tj.yaml"
    source.write_text(yaml.safe_dump(job))
    err = io.StringIO()
    with redirect_stderr(err):
        code = timed(lambda: main.main(["validate", str(source)]))
    if valid:
        assert code == 0, err.getvalue()
        return
    assert code != 0 and path in err.getvalue(), err.getvalue()
    assert not any(word in err.getvalue() for word in PLANNED), err.getvalue()


@pytest.mark.parametrize(("case", "job", "path", "valid"), HOSTILE, ids=IDS)
def test_the_admission_webhook_names_the_trainjobs_field(
    case: str, job: dict[str, Any], path: str, valid: bool, registry: KindRegistry
) -> None:
    request = {
        "uid": "u-1",
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "operation": "CREATE",
        "namespace": "team",
        "object": copy.deepcopy(job),
    }
    answer = timed(lambda: validate_v2(request, registry, default_catalog()))["response"]
    nodes = (job["spec"].get("trainer") or {}).get("numNodes")
    # Valid for the API server, but more replicas than the operator runs (--max-replicas-per-job)
    too_large = isinstance(nodes, int) and nodes > MAX_REPLICAS_PER_JOB
    if valid and not too_large:
        assert answer["allowed"] is True, answer
        return
    causes = [(c["field"], c["message"]) for c in answer["status"]["details"]["causes"]]
    assert_named(causes, path)


@pytest.mark.parametrize(("case", "job", "path", "valid"), HOSTILE, ids=IDS)
def test_the_local_backends_create_names_the_trainjobs_field(
    case: str, job: dict[str, Any], path: str, valid: bool, tmp_path: Path
) -> None:
    client = TrainingClient(LocalBackend(home=tmp_path / "home"))
    with pytest.raises(InvalidJobError) as caught:
        timed(lambda: client.create(copy.deepcopy(job), namespace="team"))
    assert_named(caught.value.problems, path)
    assert client.list(None) == []  # refused before anything was created


def test_a_problem_of_the_runtime_names_the_runtime_and_its_field() -> None:
    """A planned path that came from the runtime is named under spec.runtimeRef.name, with the
    runtime and the runtime's own field path; what the trainer set, by the trainer's field;
    what no entry covers, by `spec` (never by a planned path)."""
    job = trainer(env=[{"name": "EXTRA", "value": "1"}])
    _, planned = prepare_trainjob(Document(job, "tj.yaml"), default_catalog(), "team")
    table = planned.origins
    node = "spec.replicaSpecs.Node.template.spec.containers[0]"
    named = table.problem(Problem(f"{node}.securityContext.runAsUser", "is wrong"))
    assert named.path == RUNTIME_FIELD
    assert named.message.startswith("ClusterTrainingRuntime/torch-distributed spec.template")
    assert ".template.spec.template.spec.containers[0].securityContext.runAsUser: is wrong" in (
        named.message
    )
    assert table.problem(Problem(f"{node}.command[1]", "bad")).path == "spec.trainer.command[1]"
    last = len(planned.spec.replica_specs["Node"].template["spec"]["containers"][0]["env"]) - 1
    assert (
        table.problem(Problem(f"{node}.env[{last}].name", "x")).path == "spec.trainer.env[0].name"
    )
    assert table.problem(Problem("spec.runPolicy.whatever", "x")).path == "spec"


class RefusingBackend:
    """A backend whose create refuses as the Ray backend's does (its placement check), so that
    the client's naming is seen without a cluster."""

    name = "refusing"

    def create(self, job: Any, kind: Any, *, workdir: Path | None = None) -> Any:
        from trainop_core.backends.ray.placement import placement_for

        _, problems = placement_for(job, kind)
        raise InvalidJobError(problems, job=f"{job.kind}/{job.name}")


def test_a_backends_refusal_of_the_planned_job_names_the_trainjobs_field() -> None:
    client = TrainingClient(RefusingBackend())  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError) as caught:
        timed(lambda: client.create(trainer(numNodes=10**9), namespace="team"))
    assert_named(caught.value.problems, "spec.trainer.numNodes")
    assert "10000" in str(caught.value)


def test_a_runtimes_own_bounds_and_pod_rules_name_the_runtimes_fields() -> None:
    """Found when the runtime is read (so its file is named), never after planning a job."""
    from trainop_core.api.trainjob_validation import parse_v2
    from trainop_core.runtimes.catalog import DEFAULTS_DIR

    runtime = yaml.safe_load((Path(DEFAULTS_DIR) / "torch-distributed.yaml").read_text())
    step = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    step["replicas"] = 2**40
    pod = step["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["ports"] = [{"name": "Bad--Name", "containerPort": 70000}]
    with pytest.raises(InvalidJobError) as caught:
        parse_v2(runtime)
    paths = {p.path for p in caught.value.problems}
    where = "spec.template.spec.replicatedJobs[0]"
    port = f"{where}.template.spec.template.spec.containers[0].ports[0]"
    assert {f"{where}.replicas", f"{port}.name", f"{port}.containerPort"} <= paths
