"""Properties of hostile input: whatever bytes or whatever mutation of a job it is given, the loader
raises only InvalidJobError and the CLI exits 0 or 2, never with a traceback, in bounded time and
memory; and when it exits 2, nothing was created."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_job
from hypothesis import given, settings
from hypothesis import strategies as st

from trainop_core.api.validation import prepare
from trainop_core.backends.local import LocalBackend
from trainop_core.backends.local.state import JobDir
from trainop_core.cli.main import main
from trainop_core.errors import DamagedJobError, InvalidJobError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "local"))
from local_helpers import leftovers  # noqa: E402 - needs the path above

pytestmark = pytest.mark.timeout(900)
MEMORY_MB = 100  # peak Python allocations for one example (a billion laughs would need GBs)
COMMAND = ["true"]

# --- strategies ------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["", "../x", "a" * 70, "Worker", "Never", "ExitCode", "OnFailure", "\x00", "é", "1e400"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def base_job(kind: str) -> dict[str, Any]:
    builders = {
        "TFJob": lambda: make_job("TFJob", "prop").workers(2, command=COMMAND),
        "PyTorchJob": lambda: (
            make_job("PyTorchJob", "prop").master(command=COMMAND).workers(1, command=COMMAND)
        ),
        "XGBoostJob": lambda: (
            make_job("XGBoostJob", "prop").master(command=COMMAND).workers(1, command=COMMAND)
        ),
        "MXJob": lambda: (
            make_job("MXJob", "prop")
            .scheduler(command=COMMAND)
            .servers(1, command=COMMAND)
            .workers(1, command=COMMAND)
        ),
    }
    job = builders[kind]().run_policy(cleanPodPolicy="All").build()
    job["spec"]["runPolicy"].update(backoffLimit=1, activeDeadlineSeconds=60)
    return job


def slots(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) of every value in a job tree, the root's children first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield node, key
            yield from slots(value)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield node, index
            yield from slots(value)


def plausible(current: Any) -> st.SearchStrategy[Any]:
    """A value of the same type as `current`, often a valid one, sometimes at or past a bound."""
    if isinstance(current, bool):
        return st.booleans()
    if isinstance(current, int):
        bounds = [0, 1, 2**31 - 1, 2**31, 2**63, -1, 10**23]
        return st.integers(min_value=0, max_value=3) | st.sampled_from(bounds)
    if isinstance(current, str):
        return st.sampled_from([current, current.upper(), "", "x", "../x", "Worker"]) | st.text(
            max_size=10
        )
    return VALUES


@st.composite
def mutated_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid job of some kind, then up to 3 random edits: a plausible value of the same type
    (often still valid), any value, a deleted entry or an added one."""
    job = base_job(draw(st.sampled_from(["TFJob", "PyTorchJob", "XGBoostJob", "MXJob"])))
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        parent, key = draw(st.sampled_from(list(slots(job))))
        action = draw(st.sampled_from(["plausible"] * 4 + ["replace", "delete", "add"]))
        if action == "plausible":
            parent[key] = draw(plausible(parent[key]))
        elif action == "replace":
            parent[key] = draw(VALUES)
        elif action == "delete":
            parent.pop(key)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(VALUES)
        else:
            parent.append(draw(VALUES))
    return job


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    """A job whose annotations hold nested aliases of random depth and width: small ones load,
    big ones are refused; none may cost more than bounded memory."""
    levels, width = draw(st.integers(1, 14)), draw(st.integers(1, 12))
    bomb = "x0: &l0 [" + ", ".join(['"x"'] * width) + "]\n"
    for level in range(1, levels + 1):
        bomb += f"x{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]\n"
    job = yaml.safe_dump(base_job("TFJob"), sort_keys=False)
    return bomb + job.replace("metadata:\n", f"metadata:\n  annotations: {{bomb: *l{levels}}}\n", 1)


# --- helpers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def bounded_memory(megabytes: float = MEMORY_MB) -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak < megabytes, f"allocated {peak:.0f} MiB"


def cli(*args: str) -> tuple[int, str]:
    """`trainop ARGS` in this process: its exit code and everything it printed. A traceback
    would propagate out of `main` and fail the property."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def only_invalid_job_errors(source: Any) -> None:
    with contextlib.suppress(InvalidJobError):
        prepare(source)


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """One private TRAINOP_HOME for a whole property (a fixture per example would be reset)."""
    with tempfile.TemporaryDirectory(prefix="trainop-prop-") as tmp:
        saved = {k: os.environ.get(k) for k in ("TRAINOP_HOME", "TRAINOP_TEST_TAG",
                                                  "TRAINOP_LOCAL_MAX_REPLICAS")}  # fmt: skip
        tag = uuid.uuid4().hex
        os.environ.update(
            TRAINOP_HOME=str(Path(tmp) / "home"),
            TRAINOP_TEST_TAG=tag,
            TRAINOP_LOCAL_MAX_REPLICAS="4",  # a mutation may ask for millions: refused, exit 2
        )
        try:
            yield Path(tmp) / "home"
            assert leftovers(tag, Path(tmp) / "home") == []
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.update({key: value})


def jobs_under(home: Path) -> list[Path]:
    root = home / "jobs"
    return [p for p in root.glob("*/*") if not p.name.startswith(".")] if root.is_dir() else []


def delete_all(home: Path) -> None:
    for job in jobs_under(home):
        code, printed = cli("delete", job.name, "-n", job.parent.name)
        assert code == 0, printed


# --- the loader ------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.binary(max_size=2048))
def test_any_bytes_load_or_raise_invalid_job_error(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".yaml") as handle:
        handle.write(data)
        handle.flush()
        with bounded_memory():
            only_invalid_job_errors(Path(handle.name))


@settings(max_examples=300)
@given(mutated_jobs())
def test_any_mutated_job_loads_or_raises_invalid_job_error(job: dict[str, Any]) -> None:
    with bounded_memory():
        only_invalid_job_errors(copy.deepcopy(job))  # as data
        with contextlib.suppress(yaml.YAMLError, ValueError, OverflowError):
            text = yaml.safe_dump(job)  # as text (not every value has a YAML form)
            only_invalid_job_errors(text)


@settings(max_examples=150)
@given(alias_bombs())
def test_any_alias_structure_costs_bounded_memory(text: str) -> None:
    with bounded_memory(), contextlib.suppress(InvalidJobError):
        prepare(text)


# --- the CLI ---------------------------------------------------------------------------------


@settings(max_examples=200)
@given(
    st.one_of(st.binary(max_size=2048), mutated_jobs().map(lambda j: yaml.safe_dump(j).encode()))
)
def test_validate_and_render_exit_0_or_2_whatever_the_file(home: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".yaml") as handle:
        handle.write(data)
        handle.flush()
        for command in ("validate", "render"):
            code, printed = cli(command, handle.name)
            assert code in (0, 2), printed
            assert "Traceback" not in printed


def test_submit_exits_0_or_2_creates_nothing_on_2_and_the_mutations_reach_both(
    home: Path,
) -> None:
    """The property, then what its examples reached: the mutations must reach valid jobs too,
    or the property proves little. One test, so the count never depends on another test."""
    outcomes: dict[int, int] = {}  # exit code -> examples

    @settings(max_examples=120, deadline=None)  # each valid job starts and stops real processes
    @given(mutated_jobs())
    def submit_exits_0_or_2_and_creates_nothing_on_2(job: dict[str, Any]) -> None:
        try:
            text = yaml.safe_dump(job)
        except (yaml.YAMLError, ValueError, OverflowError):
            return
        with tempfile.NamedTemporaryFile(suffix=".yaml", mode="w") as handle:
            handle.write(text)
            handle.flush()
            code, printed = cli("submit", handle.name)
        outcomes[code] = outcomes.get(code, 0) + 1
        try:
            assert code in (0, 2), printed
            assert "Traceback" not in printed
            if code == 2:
                assert jobs_under(home) == [], printed
        finally:
            delete_all(home)

    submit_exits_0_or_2_and_creates_nothing_on_2()

    assert outcomes.get(0, 0) >= 10 and outcomes.get(2, 0) >= 10, outcomes
    print(f"submit exit codes over the examples: {outcomes}")


NAMES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["..", "../..", "/etc", "a/../../b", "default", "x" * 300, "-n", "--help"]),
)


@settings(max_examples=200)
@given(NAMES, NAMES)
def test_read_commands_take_any_name_and_namespace(home: Path, name: str, namespace: str) -> None:
    if name.startswith("-") or namespace.startswith("-"):
        name, namespace = f"x{name}", f"x{namespace}"  # an option, not a name
    for args in (
        ["get", name, "-n", namespace, "-o", "json"],
        ["get", "-n", namespace],
        ["logs", name, "-n", namespace],
        ["delete", name, "-n", namespace],
    ):
        code, printed = cli(*args)
        assert code in (0, 1, 2), printed
        assert "Traceback" not in printed
    assert jobs_under(home) == []


# --- stored state ------------------------------------------------------------------------------


@st.composite
def damaged_files(draw: st.DrawFn) -> bytes:
    """What a state file may hold after a crash, a full disk or a hand edit: a valid job cut
    short, a job mutated into any shape (status included), deep nesting, or any bytes."""
    job = draw(mutated_jobs())
    if draw(st.booleans()):
        job["status"] = draw(VALUES)
    text = json.dumps(job, indent=1).encode()
    choice = draw(st.sampled_from(["cut", "mutated", "deep", "deep job", "bytes"]))
    if choice == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if choice == "deep":
        return b"[" * draw(st.integers(60, 200_000))
    if choice == "deep job":  # written as text: json.dumps itself recurses
        depth = draw(st.integers(60, 5_000))
        job["spec"] = "SPEC"
        return json.dumps(job).replace('"SPEC"', "[" * depth + "{}" + "]" * depth).encode()
    if choice == "bytes":
        return draw(st.binary(max_size=2_000))
    return text


@settings(max_examples=200)
@given(content=damaged_files())
def test_stored_state_of_any_shape_reads_as_a_job_or_as_damaged(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    home = tmp_path_factory.mktemp("state")
    job_dir = JobDir(home / "jobs" / "default" / "prop")
    job_dir.path.mkdir(parents=True)
    job_dir.job_file.write_bytes(content)
    job_dir.events_file.write_bytes(content + b"\n" + content)
    backend = LocalBackend(home=home)

    with bounded_memory():
        with contextlib.suppress(DamagedJobError):  # the one error damage may raise
            job_dir.read_job()
        [listed] = backend.list("default")
        got = backend.get("prop", "default")
        events = job_dir.read_events()

    damaged = [job.metadata.annotations or {} for job in (listed, got)]
    assert damaged[0].keys() == damaged[1].keys()
    assert all(isinstance(value, str) for event in events for value in event.values())
