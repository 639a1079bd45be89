"""Katib export: one Experiment per kind against golden files, and the field rules behind them.

Regenerate the golden files with:
    TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/hpo/test_hpo_katib.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_job
from trainop_hpo import SpaceError, katib_experiment, katib_experiment_yaml

from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import build_registry

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1"
REGENERATE = "TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/hpo/test_hpo_katib.py"
SPACE = {
    "lr": "loguniform:1e-4:1e-1",
    "momentum": "uniform:0.5:0.99",
    "depth": "randint:2:8",
    "optimizer": "choice:adam,sgd",
    "batch": "grid:16,32,64",
}
# kind -> the replica type the script runs in (the others run it too, unchanged)
KINDS = {"TFJob": "Worker", "PyTorchJob": "Master", "MXJob": "Worker", "XGBoostJob": "Master"}


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
        template(kind), SPACE, "loss", "min", name="mnist-hpo", additional_metrics=["accuracy"]
    )
    path = GOLDEN / f"katib-{kind.lower()}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file; regenerate with:\n  {REGENERATE}"
    assert text == path.read_text(), f"{path.name} is out of date; regenerate with:\n  {REGENERATE}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_trial_template_wraps_the_job_with_the_kinds_primary_container(kind: str) -> None:
    job = template(kind)
    experiment = katib_experiment(job, SPACE, "accuracy", "max", max_trials=20, parallel=4)
    spec = experiment["spec"]
    trial = spec["trialTemplate"]
    assert experiment["apiVersion"] == "kubeflow.org/v1beta1"
    assert experiment["kind"] == "Experiment"
    assert trial["primaryContainerName"] == build_registry().get(kind).default_container
    assert trial["primaryPodLabels"] == {"training.kubeflow.org/job-role": "master"}
    assert trial["successCondition"] == 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
    assert trial["failureCondition"] == 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    assert [p["reference"] for p in trial["trialParameters"]] == list(SPACE)
    assert [p["name"] for p in trial["trialParameters"]] == list(SPACE)
    assert trial["trialSpec"]["spec"] == job["spec"], "placeholders stay as they were"
    assert "name" not in trial["trialSpec"].get("metadata", {}), "Katib names each trial"
    assert spec["objective"] == {"type": "maximize", "objectiveMetricName": "accuracy"}
    assert spec["metricsCollectorSpec"] == {"collector": {"kind": "StdOut"}}
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (20, 4)
    assert spec["algorithm"] == {"algorithmName": "random"}


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
        "batch": ("discrete", {"list": ["16", "32", "64"]}),
    }


def test_ray_tune_domains_export_like_their_strings() -> None:
    tune = pytest.importorskip("ray.tune")
    ray_space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "momentum": tune.quniform(0.5, 0.99, 0.01),
        "depth": tune.randint(2, 8),
        "optimizer": tune.choice(["adam", "sgd"]),
        "batch": tune.grid_search([16, 32, 64]),
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
