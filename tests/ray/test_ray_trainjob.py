"""A Kubeflow Trainer v2 TrainJob on Ray reads as Trainer stores it (what `trainop get -o yaml`
prints: `dump_yaml`) and applies again; env its ML policy reserves is refused before anything
starts there."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml
from builders import make_trainjob
from ray_helpers import OK, TAG

from trainop_core import dump_yaml
from trainop_core.client import TrainingClient, job_state
from trainop_core.errors import InvalidJobError


def trainjob(tag: str, **trainer: Any) -> dict[str, Any]:
    env = [{"name": TAG, "value": tag}, *trainer.pop("env", [])]
    return make_trainjob("tj", "torch-distributed", trainer={"command": OK, "env": env, **trainer})


def test_a_trainjob_reads_as_trainer_stores_it_and_its_output_runs_again(
    client: TrainingClient, tag: str
) -> None:
    created = client.create(trainjob(tag, numNodes=2))
    assert job_state(client.wait(created.name, created.namespace, timeout=120)) == "Succeeded"
    shown = dump_yaml(client.get("tj"))
    stored = yaml.safe_load(shown)
    assert (stored["apiVersion"], stored["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert stored["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert stored["spec"]["trainer"]["numNodes"] == 2
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Complete"]
    assert "replicaSpecs" not in shown and "runPolicy" not in shown
    client.delete("tj")
    again = client.create(stored)
    assert again.metadata.uid != stored["metadata"]["uid"]
    assert job_state(client.wait("tj", timeout=120)) == "Succeeded"


def test_env_the_policy_reserves_is_refused_before_anything_starts(
    client: TrainingClient, tag: str
) -> None:
    with pytest.raises(InvalidJobError, match=r"spec\.trainer\.env\[1\]\.name: must not have"):
        client.create(trainjob(tag, env=[{"name": "PET_MASTER_PORT", "value": "1"}]))
    assert client.list(None) == []


def test_what_ray_ignores_is_said_with_the_trainjobs_own_fields(
    client: TrainingClient, tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    with caplog.at_level(logging.WARNING, logger="trainop_core.backends.ray.backend"):
        created = client.create(trainjob(tag, env=[secret]))
    said = [r.getMessage() for r in caplog.records if "cannot be resolved" in r.getMessage()]
    assert said and "skipped: spec.trainer.env[1] (TOKEN)" in said[0], said
    assert not any("replicaSpecs" in r.getMessage() for r in caplog.records)
    assert job_state(client.wait(created.name, created.namespace, timeout=120)) == "Succeeded"
    client.delete("tj")
