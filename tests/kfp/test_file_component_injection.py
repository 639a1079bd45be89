"""`job_component` turns user strings (file name, job name, parameter defaults) into data inside
the generated function, never into code: a crafted name runs nothing."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import yaml
from trainop_kfp import job_component

from trainop_core.errors import InvalidJobError

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "allreduce_template.yaml"
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


def test_a_crafted_file_name_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """File names may hold quotes and newlines: this one, pasted into source, would close the
    docstring, end the function and run `open("PWNED", "w")` as soon as the component is made."""
    monkeypatch.chdir(tmp_path)
    crafted = tmp_path / 'a"""\nopen("PWNED", "w").close()\ndef _x():\n    """b.yaml'
    crafted.write_text(TEMPLATE.read_text())

    component = job_component(crafted)

    assert not (tmp_path / "PWNED").exists()
    [func] = ast.parse(inspect.getsource(component.python_func)).body  # one function, no more
    assert isinstance(func, ast.FunctionDef)
    assert 'open("PWNED", "w")' in (ast.get_docstring(func) or "")  # kept as text


@pytest.mark.parametrize(
    "name",
    ['x"):\n    import os\ndef y(', "class", "Output", "ﬁle", "a" * 500],
    ids=[
        "a name that closes the signature",
        "a keyword",
        "a name kfp uses",
        "a ligature",
        "a very long name",
    ],
)
def test_any_component_name_becomes_a_plain_identifier(tmp_path: Path, name: str) -> None:
    component = job_component(TEMPLATE, name=name)
    func = ast.parse(inspect.getsource(component.python_func)).body[0]
    assert isinstance(func, ast.FunctionDef)
    assert func.name.isascii() and func.name.isidentifier()


def write(tmp_path: Path, annotation: str, arg: str) -> Path:
    job = yaml.safe_load(TEMPLATE.read_text())
    job["metadata"]["annotations"] = {"trainop.io/parameters": annotation}
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"] = [
        arg
    ]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_a_crafted_default_is_a_value_not_code(tmp_path: Path) -> None:
    evil = "'); import os; os.system('touch PWNED'); ('"
    path = write(
        tmp_path, f'{{"steps": {evil!r}}}'.replace("'", '"', 2), "${trialParameters.steps}"
    )
    path = write(tmp_path, yaml.safe_dump({"steps": evil}), "${trialParameters.steps}")

    component = job_component(path)

    assert component.component_spec.inputs["steps"].default == evil
    assert not Path("PWNED").exists()


@pytest.mark.parametrize(
    ("annotation", "arg", "problem"),
    [
        ('{"steps": .inf}', "${trialParameters.steps}", "expected a finite number"),
        ('{"steps": 99999999999999999999999}', "${trialParameters.steps}", "fits 64 bits"),
        ("{}", "${trialParameters.run_component}", "already has an input of that name"),
        ("{}", "${trialParameters.x\u00e9}", "not a Python identifier"),
        ("a: &a [*a, *a]\nb: *a", "${trialParameters.a}", "expected a JSON or YAML mapping"),
    ],
    ids=[
        "an infinite default",
        "a default beyond 64 bits",
        "a parameter named like the body's own name",
        "a parameter name that is not ASCII",
        "a recursive annotation",
    ],
)
def test_unsafe_parameters_are_refused(
    tmp_path: Path, annotation: str, arg: str, problem: str
) -> None:
    with pytest.raises(InvalidJobError, match=problem):
        job_component(write(tmp_path, annotation, arg))
