"""The page over the other backends: the kubernetes backend on the session's real
kube-apiserver and etcd (tests/k8s.py), and a local Ray (tests/ray's fixtures). Served in this
process (ui_support.in_process) over a client of that backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_trainjob
from k8s import K8s
from ui_support import authorised, in_process

from trainop_core.client import TrainingClient

pytest.importorskip("starlette")

TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"
CONDITIONS = [  # Trainer v2's condition types, in the order stored
    {
        "type": "Suspended",
        "status": "False",
        "reason": "Resumed",
        "message": "jobs <b>made</b>",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
    },
    {
        "type": "Failed",
        "status": "True",
        "reason": "TrainingFailed",
        "message": "node 0 exited with code 3",
        "lastTransitionTime": "2026-01-02T03:05:00Z",
    },
]


@pytest.fixture
def trainer(k8s: K8s) -> K8s:
    k8s.install_trainer()
    return k8s


def test_a_trainjob_on_kubernetes_shows_its_conditions_as_stored(
    trainer: K8s, tmp_path: Path
) -> None:
    namespace = trainer.namespace
    path = f"{TRAINER}/namespaces/{namespace}/trainjobs"
    created = trainer.rest.create(path, make_trainjob("tj-ui", namespace=namespace))
    created["status"] = {"conditions": CONDITIONS}
    trainer.rest.replace(f"{path}/tj-ui/status", created)  # as the operator would write it
    kubeconfig = trainer.kubeconfig_here(tmp_path / "kubeconfig")
    client = TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))
    app, access = in_process(client, tmp_path, namespace=namespace)
    headers = authorised(access)

    rows = app.get("/api/jobs", headers=headers).json()
    assert [(r["namespace"], r["name"], r["kind"]) for r in rows] == [
        (namespace, "tj-ui", "TrainJob")
    ]
    assert rows[0]["state"] == "Failed"
    job = app.get(f"/api/jobs/{namespace}/tj-ui", headers=headers).json()
    assert job["conditions"] == CONDITIONS
    yaml_text = app.get(f"/api/jobs/{namespace}/tj-ui/yaml", headers=headers).text
    assert "kind: TrainJob" in yaml_text and "TrainingFailed" in yaml_text
    # Scoped to the namespace: the same name elsewhere is 404, without asking the cluster.
    assert app.get("/api/jobs/default/tj-ui", headers=headers).status_code == 404
    missing = app.get(f"/api/jobs/{namespace}/no-such-job", headers=headers)
    assert missing.status_code == 404 and "no-such-job" in missing.json()["error"]
