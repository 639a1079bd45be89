"""Katib export: one Experiment per kind against golden files, and the field rules behind them.

Regenerate the golden files with:
    TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/hpo/test_hpo_katib.py
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_job
from trainop_hpo import (
    SearchError,
    SpaceError,
    katib_experiment,
    katib_experiment_yaml,
    katib_notes,
)

from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import build_registry

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1"
REGENERATE = "TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/hpo/test_hpo_katib.py"
SPACE = {
    "lr": "loguniform:1e-4:1e-1",
    "momentum": "uniform:0.5:0.99",
    "depth": "randint:2:8",
    "optimizer": "choice:adam,sgd",
    "batch": "choice:16,32,64",
}
# kind -> the replica type the script runs in (the others run it too, unchanged)
KINDS = {
    "TFJob": "Worker",
    "PyTorchJob": "Master",
    "MXJob": "Worker",
    "XGBoostJob": "Master",
    "PaddleJob": "Master",
}


def template(kind: str) -> dict[str, Any]:
    args = [f"--{name}=${{trialParameters.{name}}}" for name in SPACE]
    builder = make_job(kind, "mnist").replica(KINDS[kind], 1).workers(2)
    if kind == "MXJob":
        builder = builder.scheduler().servers(1)
    builder.command(["python", "train.py", *args], KINDS[kind])
    for rtype in builder.build()["spec"][builder.replica_field]:
        if rtype != KINDS[kind]:
            builder.command(["python", "train.py", *args], rtype)
    return builder.build()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_experiment_matches_its_golden_file(kind: str) -> None:
    text = katib_experiment_yaml(
        template(kind),
        SPACE,
        "loss",
        "min",
        name="mnist-hpo",
        num_samples=12,
        max_concurrent=3,
        scheduler="asha",
        additional_metrics=["accuracy"],
    )
    path = GOLDEN / f"katib-{kind.lower()}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file; regenerate with:\n  {REGENERATE}"
    assert text == path.read_text(), f"{path.name} is out of date; regenerate with:\n  {REGENERATE}"


# The replica whose metrics are the trial's, as the core defines it per kind.
PRIMARY = {
    "TFJob": "worker",
    "PyTorchJob": "master",
    "MXJob": "worker",
    "XGBoostJob": "master",
    "PaddleJob": "worker",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_trial_template_wraps_the_job_with_the_kinds_primary_container(kind: str) -> None:
    job = template(kind)
    experiment = katib_experiment(job, SPACE, "accuracy", "max", num_samples=20, max_concurrent=4)
    spec = experiment["spec"]
    trial = spec["trialTemplate"]
    assert experiment["apiVersion"] == "kubeflow.org/v1beta1"
    assert experiment["kind"] == "Experiment"
    assert trial["primaryContainerName"] == build_registry().get(kind).default_container
    assert trial["primaryPodLabels"] == {
        "training.kubeflow.org/replica-type": PRIMARY[kind],
        "training.kubeflow.org/replica-index": "0",
    }
    assert trial["successCondition"] == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    assert trial["failureCondition"] == 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    assert [p["reference"] for p in trial["trialParameters"]] == list(SPACE)
    assert [p["name"] for p in trial["trialParameters"]] == list(SPACE)
    assert trial["trialSpec"]["spec"] == job["spec"], "placeholders stay as they were"
    assert "name" not in trial["trialSpec"].get("metadata", {}), "Katib names each trial"
    assert spec["objective"] == {"type": "maximize", "objectiveMetricName": "accuracy"}
    assert spec["metricsCollectorSpec"] == {"collector": {"kind": "StdOut"}}
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (20, 4)
    assert spec["maxFailedTrialCount"] == 20  # as Ray Tune: failures never end the search
    assert spec["algorithm"] == {"algorithmName": "random"}
    assert katib_problems(experiment) == []


def test_an_mpijob_trial_is_read_from_its_launcher_s_container_whatever_its_name() -> None:
    """mpirun forwards every rank's output to the launcher; MPI containers may have any name."""
    args = [f"--{name}=${{trialParameters.{name}}}" for name in SPACE]
    job = make_job("MPIJob", "mnist").replica("Launcher", 1).workers(2)
    job.container("Launcher", name="mpi-launcher", command=["mpirun", "python", "train.py", *args])
    trial = katib_experiment(job.build(), SPACE, "loss")["spec"]["trialTemplate"]
    assert trial["primaryContainerName"] == "mpi-launcher"
    assert trial["primaryPodLabels"] == {
        "training.kubeflow.org/replica-type": "launcher",
        "training.kubeflow.org/replica-index": "0",
    }


def test_the_mxjob_primary_pod_is_worker_0_not_the_servers_with_the_master_label() -> None:
    trial = katib_experiment(template("MXJob"), SPACE, "loss")["spec"]["trialTemplate"]
    labels = trial["primaryPodLabels"]
    assert "training.kubeflow.org/job-role" not in labels
    assert labels == {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    }


def test_the_primary_pod_labels_are_the_labels_the_operator_puts_on_that_pod_only() -> None:
    from trainop_core.api.validation import prepare
    from trainop_core.planner import KubernetesAddressing, Observed, plan

    job = template("MXJob")
    labels = katib_experiment(job, SPACE, "loss")["spec"]["trialTemplate"]["primaryPodLabels"]
    filled = yaml.safe_load(yaml.safe_dump(job).replace("${trialParameters.", "${"))
    kind, model = prepare(filled)
    pods = plan(model, kind, Observed(), T0, KubernetesAddressing(model, kind)).create_pods
    selected = [
        p["metadata"]["name"] for p in pods if labels.items() <= p["metadata"]["labels"].items()
    ]
    assert selected == ["mnist-worker-0"]


def test_each_search_space_becomes_its_katib_parameter_type() -> None:
    parameters = {
        p["name"]: (p["parameterType"], p["feasibleSpace"])
        for p in katib_experiment(template("PyTorchJob"), SPACE, "loss")["spec"]["parameters"]
    }
    assert parameters == {
        "lr": ("double", {"min": "0.0001", "max": "0.1", "distribution": "logUniform"}),
        "momentum": ("double", {"min": "0.5", "max": "0.99"}),
        "depth": ("int", {"min": "2", "max": "7"}),  # randint excludes HI, Katib includes max
        "optimizer": ("categorical", {"list": ["adam", "sgd"]}),
        "batch": ("discrete", {"list": ["16", "32", "64"]}),  # numbers: discrete
    }


def test_ray_tune_domains_export_like_their_strings() -> None:
    tune = pytest.importorskip("ray.tune")
    ray_space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "momentum": tune.quniform(0.5, 0.99, 0.01),
        "depth": tune.randint(2, 8),
        "optimizer": tune.choice(["adam", "sgd"]),
        "batch": tune.choice([16, 32, 64]),
    }
    exported = katib_experiment(template("PyTorchJob"), ray_space, "loss")["spec"]["parameters"]
    from_strings = katib_experiment(template("PyTorchJob"), SPACE, "loss")["spec"]["parameters"]
    momentum = {"min": "0.5", "max": "0.99", "step": "0.01"}
    assert exported[1] == {"name": "momentum", "parameterType": "double", "feasibleSpace": momentum}
    assert exported[:1] + exported[2:] == from_strings[:1] + from_strings[2:]


def test_parameters_and_placeholders_must_match() -> None:
    with pytest.raises(InvalidJobError, match="needs a value for trial parameter 'batch'"):
        katib_experiment(
            template("XGBoostJob"), {k: v for k, v in SPACE.items() if k != "batch"}, "loss"
        )
    with pytest.raises(InvalidJobError, match=r"parameters\.extra: is not used"):
        katib_experiment(template("XGBoostJob"), {**SPACE, "extra": "choice:1,2"}, "loss")


def test_a_distribution_katib_cannot_express_is_an_error_naming_the_parameter() -> None:
    tune = pytest.importorskip("ray.tune")
    with pytest.raises(SpaceError, match="parameter 'lr': Katib has no Normal distribution"):
        katib_experiment(template("TFJob"), {**SPACE, "lr": tune.randn(0, 1)}, "loss")


def test_the_yaml_reads_back_as_the_same_experiment() -> None:
    experiment = katib_experiment(template("TFJob"), SPACE, "loss")
    assert yaml.safe_load(katib_experiment_yaml(template("TFJob"), SPACE, "loss")) == experiment


# --- the same search ----------------------------------------------------------------------------
GRID = {
    "lr": "grid:0.001,0.01,0.1",
    "momentum": "grid:0.5,0.9",
    "depth": 4,  # a constant: one value in any algorithm
    "optimizer": "grid:adam,sgd",
    "batch": "grid:16,32,64",
}


def search_of(space: dict[str, object], **search: object) -> dict[str, object]:
    spec: dict[str, object] = katib_experiment(template("PyTorchJob"), space, "loss", **search)[
        "spec"
    ]
    return spec


def test_a_grid_search_is_katibs_grid_with_one_trial_per_combination() -> None:
    spec = search_of(GRID)
    assert spec["algorithm"] == {"algorithmName": "grid"}
    assert (spec["maxTrialCount"], spec["maxFailedTrialCount"]) == (3 * 2 * 2 * 3, 36)
    assert spec["parallelTrialCount"] == 3  # Katib's default; Ray Tune's depends on its CPUs
    assert "earlyStopping" not in spec


def test_samples_and_max_concurrent_set_the_trial_counts() -> None:
    spec = search_of(SPACE, num_samples=8, max_concurrent=2, max_failed=5)
    assert spec["algorithm"] == {"algorithmName": "random"}
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (8, 2)
    assert spec["maxFailedTrialCount"] == 5
    assert search_of(SPACE, num_samples=2, max_concurrent=6)["parallelTrialCount"] == 2


def test_a_sampled_space_may_name_another_katib_algorithm() -> None:
    spec = search_of(SPACE, algorithm="bayesianoptimization")
    assert spec["algorithm"] == {"algorithmName": "bayesianoptimization"}


def test_asha_becomes_medianstop_and_the_difference_is_noted() -> None:
    spec = search_of(SPACE, num_samples=8, scheduler="asha")
    assert spec["earlyStopping"] == {
        "algorithmName": "medianstop",
        "algorithmSettings": [
            {"name": "min_trials_required", "value": "3"},
            {"name": "start_step", "value": "1"},
        ],
    }
    (note,) = katib_notes(SPACE, num_samples=8, max_concurrent=2, scheduler="asha")
    assert "medianstop" in note and "timestamp" in note


@pytest.mark.parametrize(
    ("space", "search", "expected"),
    [
        ({**SPACE, "batch": "grid:16,32"}, {}, r"cannot enumerate grid parameters \(batch\)"),
        (GRID, {"num_samples": 2}, "each of the 36 combinations once"),
        (GRID, {"algorithm": "random"}, "grid parameters is Katib's grid"),
        (SPACE, {"algorithm": "grid"}, "'grid' needs grid parameters"),
        (SPACE, {"scheduler": "pbt"}, "scheduler 'pbt'"),
        (SPACE, {"num_samples": 4, "max_failed": 5}, "max_failed must be between 0 and the 4"),
    ],
    ids=[
        "grid and sampled parameters together are refused",
        "a repeated grid is refused",
        "a grid under another algorithm is refused",
        "grid without grid parameters is refused",
        "a scheduler Katib has no equivalent of is refused",
        "more allowed failures than trials is refused",
    ],
)
def test_what_katib_cannot_express_is_refused_with_what_to_change(
    space: dict[str, object], search: dict[str, object], expected: str
) -> None:
    with pytest.raises(SearchError, match=expected):
        search_of(space, **search)


@pytest.mark.parametrize(
    "experiment",
    [
        *(pytest.param(f, id=f"golden {f.name}") for f in sorted(GOLDEN.glob("katib-*.yaml"))),
        pytest.param("grid", id="a grid search"),
        pytest.param("asha", id="an ASHA search"),
    ],
)
def test_exports_use_only_katib_v1beta1_fields_and_pass_its_webhook_rules(
    experiment: object,
) -> None:
    if experiment == "grid":
        data = katib_experiment(template("TFJob"), GRID, "loss", max_concurrent=40)
    elif experiment == "asha":
        data = katib_experiment(template("MXJob"), SPACE, "loss", num_samples=9, scheduler="asha")
    else:
        data = yaml.safe_load(Path(str(experiment)).read_text())
    assert katib_problems(data) == []


# Field names of kubeflow.org/v1beta1 Experiment (katib pkg/apis/controller/experiments/v1beta1
# and common/v1beta1 types), and the rules its validating webhook and suggestion services check.
KATIB_FIELDS: dict[str, set[str]] = {
    "spec": {"parameters", "objective", "algorithm", "earlyStopping", "trialTemplate",
             "parallelTrialCount", "maxTrialCount", "maxFailedTrialCount",
             "metricsCollectorSpec", "nasConfig", "resumePolicy"},
    "objective": {"type", "goal", "objectiveMetricName", "additionalMetricNames",
                  "metricStrategies"},
    "algorithm": {"algorithmName", "algorithmSettings"},
    "earlyStopping": {"algorithmName", "algorithmSettings"},
    "parameter": {"name", "parameterType", "feasibleSpace"},
    "feasibleSpace": {"max", "min", "list", "step", "distribution"},
    "trialTemplate": {"retain", "trialSpec", "configMap", "trialParameters", "primaryPodLabels",
                      "primaryContainerName", "successCondition", "failureCondition"},
    "trialParameter": {"name", "description", "reference"},
    "metricsCollectorSpec": {"source", "collector"},
}  # fmt: skip
KATIB_ALGORITHMS = {"random", "tpe", "grid", "multivariate-tpe", "hyperband",
                    "bayesianoptimization", "cmaes", "sobol", "enas", "darts", "pbt"}  # fmt: skip


def katib_problems(experiment: dict[str, Any]) -> list[str]:
    spec = experiment["spec"]
    problems = _unknown("spec", spec)
    for name in ("objective", "algorithm", "trialTemplate", "metricsCollectorSpec"):
        problems += _unknown(name, spec[name])
    problems += _unknown("earlyStopping", spec.get("earlyStopping", {}))
    for parameter in spec["parameters"]:
        problems += _unknown("parameter", parameter) + _parameter(parameter)
    for used in spec["trialTemplate"]["trialParameters"]:
        problems += _unknown("trialParameter", used)
    trials, parallel = spec["maxTrialCount"], spec["parallelTrialCount"]
    failed = spec.get("maxFailedTrialCount", 0)
    if not (0 < parallel <= trials and 0 <= failed <= trials):
        problems.append(f"counts: parallel {parallel}, max {trials}, failed {failed}")
    if spec["objective"]["type"] not in ("minimize", "maximize"):
        problems.append(f"objective.type {spec['objective']['type']}")
    algorithm = spec["algorithm"]["algorithmName"]
    if algorithm not in KATIB_ALGORITHMS:
        problems.append(f"algorithm {algorithm}")
    if algorithm == "grid" and trials > _combinations(spec["parameters"]):
        problems.append("grid: more trials than combinations")
    if spec.get("earlyStopping", {}).get("algorithmName", "medianstop") != "medianstop":
        problems.append("earlyStopping: Katib has only medianstop")
    return problems


def _unknown(what: str, data: dict[str, Any]) -> list[str]:
    return [f"{what}.{key}: not a Katib field" for key in data if key not in KATIB_FIELDS[what]]


def _parameter(parameter: dict[str, Any]) -> list[str]:
    space = parameter["feasibleSpace"]
    problems = _unknown("feasibleSpace", space)
    ptype = parameter["parameterType"]
    if ptype in ("int", "double") and ("list" in space or not {"min", "max"} & set(space)):
        problems.append(f"{parameter['name']}: {ptype} needs min/max, no list")
    if ptype in ("discrete", "categorical") and ({"min", "max", "step"} & set(space)):
        problems.append(f"{parameter['name']}: {ptype} takes a list only")
    if ptype not in ("int", "double", "discrete", "categorical"):
        problems.append(f"{parameter['name']}: parameterType {ptype}")
    if space.get("distribution", "uniform") not in ("uniform", "logUniform", "normal", "logNormal"):
        problems.append(f"{parameter['name']}: distribution {space['distribution']}")
    return problems


def _combinations(parameters: list[dict[str, Any]]) -> int:
    count = 1
    for parameter in parameters:
        space = parameter["feasibleSpace"]
        count *= len(space["list"]) if "list" in space else 10**9  # ranges: not a grid
    return count
