"""`trainop ui` over the Ray backend on the package's real multi-node Ray cluster: the job list
shows a Ray job, its page its replica and conditions, and its log stream its replica's lines.
The page is served in this process (tests/ui/ui_support.in_process) over the Ray client."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_job
from ray_helpers import py, tagged
from ui.ui_support import authorised, in_process

from trainop_core.client import TrainingClient

pytest.importorskip("starlette")


def test_the_page_lists_a_ray_job_and_streams_its_log(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    hello = py("print('hello from ray loss=0.5 step=1', flush=True)")
    client.create(tagged(make_job("PyTorchJob", "ui-ray").master(command=hello), tag))
    client.wait("ui-ray", timeout=120)
    app, access = in_process(client, tmp_path)
    headers = authorised(access)
    namespace = client.default_namespace

    rows = app.get("/api/jobs", headers=headers).json()
    assert [(r["name"], r["state"]) for r in rows if r["name"] == "ui-ray"] == [
        ("ui-ray", "Succeeded")
    ]
    job = app.get(f"/api/jobs/{namespace}/ui-ray", headers=headers).json()
    assert job["replicaIds"] == ["master-0"]
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in job["conditions"])
    log = app.get(f"/api/jobs/{namespace}/ui-ray/logs", headers=headers).text
    assert '["master-0","hello from ray loss=0.5 step=1"]' in log and "event: end" in log
    metrics = app.get(f"/api/jobs/{namespace}/ui-ray/metrics", headers=headers)
    assert '"values":{"loss":0.5}' in metrics.text
