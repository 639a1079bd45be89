"""`trainop tune`: input errors (exit 2, naming what is wrong), the Katib export, the missing-Ray
message, and (slow) whole searches over the shipped example printing the results table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hpo_support import REPO, quadratic_loss
from trainop_hpo import katib_experiment

from trainop_core.cli.main import main

EXAMPLE = REPO / "examples" / "hpo" / "quadratic.yaml"
PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "integrations" / "hpo")])


def tune(*args: str) -> int:
    return main(["tune", str(EXAMPLE), *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--param", "lr=loguniform:0.1"], "parameter 'lr': loguniform: expected loguniform:LO:HI"),
        (["--param", "lr:choice:1,2"], "--param 'lr:choice:1,2': expected NAME=SPEC"),
        (["--param", "lr=choice:1,2", "--param", "depth=grid:3,5"], "parameters.depth"),
        (["--param", "momentum=uniform:0:1"], "needs a value for trial parameter 'lr'"),
        ([], "give at least one --param NAME=SPEC"),
        (["--param", "lr=choice:1", "--samples", "0"], "--samples must be at least 1"),
        (["--param", "lr=choice:1", "--cpus-per-trial", "0"], "--cpus-per-trial must be positive"),
        (["--param", "lr=choice:1", "--export-only"], "--export-only needs --katib-export"),
    ],
    ids=[
        "a range with one bound",
        "a colon instead of an equals sign",
        "a parameter the template does not use",
        "a template parameter without a search space",
        "no parameter at all",
        "no samples",
        "no CPU per trial",
        "export-only without an export file",
    ],
)
def test_bad_input_exits_2_and_says_what_is_wrong(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tune("--metric", "loss", *args) == 2
    assert message in capsys.readouterr().err


def test_a_missing_template_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["tune", str(tmp_path / "nope.yaml"), "--param", "lr=choice:1", "--metric", "m"])
    assert code == 2
    assert "no such file" in capsys.readouterr().err


def test_the_katib_export_is_written_without_running_a_search(tmp_path: Path) -> None:
    out = tmp_path / "experiment.yaml"
    params = ["--param", "lr=loguniform:1e-4:1e-1"]
    assert (
        tune(
            *params,
            "--metric",
            "loss",
            "--mode",
            "min",
            "--katib-export",
            str(out),
            "--export-only",
        )
        == 0
    )
    space = {"lr": "loguniform:1e-4:1e-1"}
    assert yaml.safe_load(out.read_text()) == katib_experiment(EXAMPLE, space, "loss", "min")


def test_the_katib_export_carries_samples_concurrency_and_the_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "experiment.yaml"
    search = ["--samples", "8", "--max-concurrent", "2", "--scheduler", "asha"]
    export = ["--katib-export", str(out), "--export-only"]
    assert tune("--param", "lr=uniform:0:0.1", "--metric", "loss", *search, *export) == 0

    spec = yaml.safe_load(out.read_text())["spec"]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (8, 2)
    assert spec["earlyStopping"]["algorithmName"] == "medianstop"
    assert "note: ASHA became Katib's medianstop" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--param", "lr=grid:0.01,0.1", "--samples", "3"], "each of the 2 combinations once"),
        (["--param", "lr=grid:0.01,0.1", "--time-budget", "60"], "no time budget"),
    ],
    ids=["a repeated grid", "a time budget"],
)
def test_a_search_katib_cannot_express_is_not_exported(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "experiment.yaml"
    assert tune(*args, "--metric", "loss", "--katib-export", str(out), "--export-only") == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_without_ray_tune_exits_2_and_names_the_extra() -> None:
    # A child interpreter where `import ray` fails, as without the extra; --help must still work.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from trainop_core.cli.main import build_parser, main\n"
        "build_parser().format_help()\n"
        "import trainop_hpo, trainop_hpo.runner, trainop_hpo.katib\n"
        f"sys.exit(main(['tune', {str(EXAMPLE)!r}, '--param', 'lr=choice:1', '--metric', 'l']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'trainop[ray]'" in done.stderr


def test_importing_the_core_and_the_cli_does_not_import_ray() -> None:
    code = (
        "import sys, trainop_core, trainop_core.client, trainop_hpo\n"
        "from trainop_core.cli.main import build_parser\n"
        "build_parser()\n"
        "from trainop_hpo import TrialRunner, katib_experiment, parse_params\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_search_prints_every_trial_and_the_best_parameters(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = [0.001, 0.01, 0.1]
    code = tune(
        "--param",
        f"lr=grid:{','.join(map(str, grid))}",
        "--metric",
        "loss",
        "--cpus-per-trial",
        "0.5",
        "-n",
        "cli",
        "--storage-path",
        str(tmp_path),
    )
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["TRIAL", "PARAMS", "LOSS", "STATE"]
    rows = {
        line.split()[1]: line.split()[2:]
        for line in lines[1:]
        if "lr=" in line and not line.startswith("best")
    }
    expected = {f"lr={lr}": [f"{quadratic_loss(lr, 5):.6g}", "Succeeded"] for lr in grid}
    assert rows == expected
    best = min(grid, key=lambda lr: quadratic_loss(lr, 5))
    assert lines[-1].startswith(f"best: lr={best} (")


@pytest.mark.slow
def test_a_search_whose_every_trial_fails_exits_1(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tune(
        "--param", "lr=grid:-1,-2", "--metric", "loss", "--cpus-per-trial", "0.5", "-n", "cli-fail",
        "--storage-path", str(tmp_path),
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1
    assert "every trial failed" in captured.err
    assert captured.err.count("--lr must not be negative") == 2
