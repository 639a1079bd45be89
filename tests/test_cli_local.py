"""`trainop run | submit | get | logs | delete` on the local backend, as a user types them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from builders import make_job

from trainop_core.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "local"))  # the process scans of the local tests
from local_helpers import leftovers  # noqa: E402 - needs the path above


def py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A private TRAINOP_HOME and a tag every process started by the test carries."""
    monkeypatch.setenv("TRAINOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRAINOP_TEST_TAG", uuid.uuid4().hex)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    yield dict(os.environ)
    main(["delete", *_names(tmp_path / "home")]) if _names(tmp_path / "home") else None
    assert leftovers(os.environ["TRAINOP_TEST_TAG"], tmp_path / "home") == []


def _names(home: Path) -> list[str]:
    space = home / "jobs" / "default"
    return (
        sorted(p.name for p in space.iterdir() if not p.name.startswith("."))
        if space.is_dir()
        else []
    )


def job_file(tmp_path: Path, builder: object, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(builder.yaml())  # type: ignore[attr-defined]
    return path


def test_run_streams_prefixed_logs_and_exits_0_on_success(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hello.py").write_text("import os\nprint('hello from rank', os.environ['RANK'])\n")
    job = (
        make_job("PyTorchJob", "hello")
        .master(command=["python", "hello.py"])
        .workers(1, command=["python", "hello.py"])
    )
    code = main(["run", str(job_file(tmp_path, job))])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "master-0 | hello from rank 0" in out.splitlines()
    assert "worker-0 | hello from rank 1" in out.splitlines()
    assert "pytorchjob.kubeflow.org/hello created" in err
    assert "are not pulled" in err  # said once
    assert err.count("are not pulled") == 1


def test_run_reads_the_job_from_stdin_and_rm_deletes_it_at_the_end(
    env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    (tmp_path / "hi.py").write_text("import os\nprint('hi', os.environ['WORLD_SIZE'])\n")
    job = make_job("XGBoostJob", "piped").master().workers(1).command(["python", "hi.py"])
    monkeypatch.chdir(tmp_path)  # with `-`, relative paths resolve in the current directory
    monkeypatch.setattr(sys, "stdin", io.StringIO(job.yaml()))
    code = main(["run", "-", "--rm"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "master-0 | hi 2" in out.splitlines()
    assert 'xgboostjob.kubeflow.org "piped" deleted' in err
    assert _names(tmp_path / "home") == []


def test_run_rm_deletes_a_failed_job_too(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job("TFJob", "gone").workers(1, command=py("raise SystemExit(3)"))
    assert main(["run", str(job_file(tmp_path, job)), "--rm"]) == 1
    assert "Failed" in capsys.readouterr().err
    assert _names(tmp_path / "home") == []


def test_run_exits_1_when_the_job_fails(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job("TFJob", "boom").workers(1, command=py("raise SystemExit(4)"))
    assert main(["run", str(job_file(tmp_path, job))]) == 1
    assert "Failed" in capsys.readouterr().err


def test_invalid_file_exits_2_and_creates_nothing(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = (
        make_job("PyTorchJob", "Bad_Name").master(command=["python"]).workers(1, command=["python"])
    )
    path = job_file(tmp_path, job.container("Worker", image=None))
    assert main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith(f"{path}: PyTorchJob/Bad_Name: metadata.name: ") for line in lines)
    image = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image"
    assert f"{path}: PyTorchJob/Bad_Name: {image}: required field is missing" in lines
    assert not (tmp_path / "home").exists()


def test_a_container_without_command_is_rejected_naming_the_field(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job("TFJob", "nocmd").workers(1)
    assert main(["submit", str(job_file(tmp_path, job))]) == 2
    err = capsys.readouterr().err
    command = "spec.tfReplicaSpecs.Worker.template.spec.containers[0].command"
    assert f"{command}: required by the local backend" in err
    assert _names(tmp_path / "home") == []


def test_timeout_stops_the_job_and_exits_124(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job("TFJob", "slow").workers(2, command=py("import time; time.sleep(60)"))
    started = time.monotonic()
    assert main(["run", "--timeout", "1", str(job_file(tmp_path, job))]) == 124
    assert time.monotonic() - started < 8
    capsys.readouterr()
    assert main(["get", "slow", "-o", "json"]) == 0
    status = json.loads(capsys.readouterr().out)["status"]
    assert status["conditions"][-1]["type"] == "Failed"
    assert "--timeout 1 s expired" in status["conditions"][-1]["message"]
    assert leftovers(env["TRAINOP_TEST_TAG"], tmp_path / "home") == []


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
    ids=["Ctrl-C exits 130", "SIGTERM exits 143"],
)
def test_interrupting_run_stops_every_replica_and_records_the_job_failed(
    env: dict[str, str], tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    started = py("import time; print('started', flush=True); time.sleep(60)")
    job = make_job("PyTorchJob", "intr").master(command=started).workers(2, command=started)
    run = subprocess.Popen(
        [sys.executable, "-m", "trainop_core", "run", str(job_file(tmp_path, job))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert run.stdout is not None
    seen = {run.stdout.readline().split(" | ")[0] for _ in range(3)}
    assert seen == {"master-0", "worker-0", "worker-1"}
    run.send_signal(sig)
    assert run.wait(timeout=20) == code
    # No replica and no supervisor left:
    assert leftovers(env["TRAINOP_TEST_TAG"], tmp_path / "home") == []
    record = json.loads((tmp_path / "home/jobs/default/intr/job.json").read_text())
    last = record["status"]["conditions"][-1]
    reason = f"stopped by user ({sig.name})"
    assert (last["type"], last["reason"], last["message"]) == ("Failed", "PyTorchJobFailed", reason)


def test_submit_get_logs_delete(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = (
        make_job("XGBoostJob", "xgb")
        .master(command=py("print('m')"))
        .workers(2, command=py("print('w')"))
    )
    assert main(["submit", str(job_file(tmp_path, job))]) == 0
    assert capsys.readouterr().out == "xgboostjob.kubeflow.org/xgb created\n"
    assert main(["logs", "xgb", "-f"]) == 0
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "master-0 | m",
        "worker-0 | w",
        "worker-1 | w",
    ]
    assert main(["logs", "xgb", "--replica", "worker-1"]) == 0
    assert capsys.readouterr().out == "w\n"
    assert main(["get"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "KIND", "STATE", "PROGRESS", "ETA", "AGE", "REPLICAS"]
    assert row.split()[:3] == ["xgb", "XGBoostJob", "Succeeded"]  # no progress printed: none
    assert row.endswith("master 1/1 worker 2/2")
    assert main(["get", "-A"]) == 0
    assert capsys.readouterr().out.split()[:8] == [
        "NAMESPACE",
        "NAME",
        "KIND",
        "STATE",
        "PROGRESS",
        "ETA",
        "AGE",
        "REPLICAS",
    ]
    assert main(["delete", "xgb"]) == 0
    assert capsys.readouterr().out == 'xgboostjob.kubeflow.org "xgb" deleted\n'
    assert main(["get", "xgb"]) == 1
    assert "NotFound" in capsys.readouterr().err


def test_run_decorators_decorates_the_local_replicas_and_kubernetes_refuses_the_flag(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "decorators.yaml"
    config.write_text(
        "apiVersion: trainop.kubeflow.org/v1alpha1\nkind: DecoratorConfiguration\n"
        "entryPoints: false\ndecorators: [{env: {SITE: lab}}]\n"
    )
    job = make_job("PyTorchJob", "deco").master(command=py("import os; print(os.environ['SITE'])"))
    code = main(["run", str(job_file(tmp_path, job)), "--decorators", str(config), "--rm"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "master-0 | lab" in out.splitlines()
    code = main(["submit", str(job_file(tmp_path, job)), "--decorators", str(config),
                 "--backend", "kubernetes"])  # fmt: skip
    assert code == 2 and "the operator decorates pods" in capsys.readouterr().err


def test_run_a_trainjob_with_a_runtime_from_a_named_directory_and_get_it_as_trainer_says(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    (runtimes / "site.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: trainer.kubeflow.org/v1alpha1
            kind: ClusterTrainingRuntime
            metadata: {name: site-plain, labels: {trainer.kubeflow.org/framework: plain}}
            spec:
              mlPolicy: {numNodes: 2}
              template:
                spec:
                  replicatedJobs:
                    - name: node
                      template:
                        spec:
                          template:
                            spec:
                              containers:
                                - name: node
                                  image: site/python:3
                                  env: [{name: SITE, value: "yes"}]
            """
        )
    )
    code = "import os; print('node says', os.environ['SITE'], 'PET_NNODES' in os.environ)"
    job = tmp_path / "tj.yaml"
    job.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: trainer.kubeflow.org/v1alpha1
            kind: TrainJob
            metadata: {{name: plain}}
            spec:
              runtimeRef: {{name: site-plain}}
              trainer: {{command: [python, -c, "{code}"]}}
            """
        )
    )
    assert main(["run", "--runtimes", str(runtimes), str(job)]) == 0
    out, err = capsys.readouterr()
    assert sorted(line for line in out.splitlines() if "node says" in line) == [
        "node-0 | node says yes False",  # the plain policy sets no contract env
        "node-1 | node says yes False",
    ]
    assert "trainjob.trainer.kubeflow.org/plain created" in err
    assert "trainjob.trainer.kubeflow.org/plain Complete after" in err
    assert main(["get", "plain"]) == 0
    assert "Complete" in capsys.readouterr().out


def test_get_prints_a_trainjob_as_trainer_stores_it_and_the_output_runs_again(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    written = tmp_path / "tj.yaml"
    written.write_text(
        textwrap.dedent(
            """\
            apiVersion: trainer.kubeflow.org/v1alpha1
            kind: TrainJob
            metadata: {name: again}
            spec:
              runtimeRef: {name: torch-distributed}
              trainer: {numNodes: 2, command: [python, -c, "print('trained')"]}
            """
        )
    )
    assert main(["run", str(written)]) == 0
    capsys.readouterr()
    assert main(["get", "again", "-o", "yaml"]) == 0
    shown = capsys.readouterr().out
    assert main(["get", "again", "-o", "json"]) == 0
    stored = yaml.safe_load(shown)
    assert json.loads(capsys.readouterr().out) == stored
    assert (stored["apiVersion"], stored["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert stored["spec"] == {
        "runtimeRef": {
            "name": "torch-distributed",
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        },
        "trainer": {"numNodes": 2, "command": ["python", "-c", "print('trained')"]},
        "suspend": False,
        "managedBy": "trainer.kubeflow.org/trainjob-controller",
    }
    assert [(c["type"], c["status"]) for c in stored["status"]["conditions"]] == [
        ("Complete", "True")
    ]
    assert stored["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    assert "replicaSpecs" not in shown and "runPolicy" not in shown and "Succeeded" not in shown
    # Applied again (uid, timestamps and status in it): the same TrainJob runs once more.
    assert main(["delete", "again"]) == 0
    (tmp_path / "shown.yaml").write_text(shown)
    assert main(["run", str(tmp_path / "shown.yaml")]) == 0
    assert "trainjob.trainer.kubeflow.org/again Complete after" in capsys.readouterr().err
    assert main(["get", "again", "-o", "yaml"]) == 0
    again = yaml.safe_load(capsys.readouterr().out)
    assert again["spec"] == stored["spec"]
    assert again["metadata"]["uid"] != stored["metadata"]["uid"]  # a new job
