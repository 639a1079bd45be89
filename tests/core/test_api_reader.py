"""Hostile job sources: every one ends as an InvalidJobError naming the problem, quickly and in
bounded memory, whether it comes as a file, as text, from a stream or as data built in code."""

from __future__ import annotations

import io
import re
import resource
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import minimal_job

from trainop_core.api.load import load_jobs, read_documents
from trainop_core.api.reader import MAX_DEPTH, MAX_NODES, MAX_SOURCE_BYTES, read_stream
from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError

pytestmark = pytest.mark.timeout(120)


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """The classic: each level is `width` aliases of the one below; ~1 KB of YAML."""
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*l{level - 1}"] * width)
        text += f"l{level}: &l{level} [{aliases}]\n"
    return text


def problem_of(source: Any) -> str:
    """The message of the InvalidJobError `prepare` raises for `source` (it must raise)."""
    with pytest.raises(InvalidJobError) as caught:
        prepare(source)
    return str(caught.value)


def within_bounds(action: Any, *, seconds: float = 20, megabytes: float = 64) -> None:
    """Run `action`; it must take at most `seconds` and allocate at most `megabytes` (peak)."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        action()
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    assert elapsed < seconds, f"took {elapsed:.1f} s"
    assert peak < megabytes, f"allocated {peak:.0f} MiB"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (billion_laughs(), f"more than {MAX_NODES} values once aliases are expanded"),
        ("x: &a [*a]\n", "an alias refers to a value that contains it"),
        ("a: &a {b: *a}", "an alias refers to a value that contains it"),
        ("kind: TFJob\nkind: PyTorchJob\n", "duplicate key 'kind' (first written on line 1)"),
        ('{"kind": "TFJob", "kind": "X"}', "duplicate key 'kind'"),
        ("? [a, b]\n: c\n", "a mapping key must be a string"),
        ("replicas: " + "9" * 5_000, "a value cannot be read"),
        ("x: !!timestamp 0000-01-01", "a value cannot be read"),
        ("x: !!python/object:os.system ls", "not valid YAML or JSON: "),
        ("a: *nowhere", "not valid YAML or JSON: "),
        ("a: \x00", "not valid YAML or JSON: "),
    ],
    ids=[
        "a billion laughs is refused before it is expanded",
        "a list that contains itself is refused",
        "a mapping that contains itself is refused",
        "a duplicate key is refused instead of the last one silently winning",
        "a duplicate key in JSON is refused too",
        "a list as a mapping key is refused",
        "an integer of 5000 digits is refused",
        "a timestamp Python cannot represent is refused",
        "a Python object tag is refused",
        "an undefined alias is refused",
        "a NUL character is refused",
    ],
)
def test_hostile_yaml_is_refused_with_a_message(text: str, expected: str) -> None:
    message = ""

    def load() -> None:
        nonlocal message
        message = problem_of(text)

    within_bounds(load)
    assert expected in message


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("x: !!python/object:os.system ls", 1, 4),
        ("a: 1\nb: *nowhere", 2, 4),
        ("a: 1\nb: c\x00", 2, 5),
    ],
    ids=["a Python object tag", "an undefined alias", "a NUL character"],
)
def test_what_the_yaml_library_refuses_is_named_with_where(
    text: str, line: int, column: int
) -> None:
    """The wording of such problems is the YAML library's; trainop adds the prefix and where."""
    message = problem_of(text)
    assert "not valid YAML or JSON: " in message
    assert f"(line {line}, column {column})" in message


def _flow_lists(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def _flow_mappings(levels: int) -> str:
    return "{a: " * levels + "1" + "}" * levels


def _flow_mixture(levels: int) -> str:
    opening = "".join("[" if level % 2 else "{a: " for level in range(levels))
    closing = "".join("]" if level % 2 else "}" for level in reversed(range(levels)))
    return opening + "1" + closing


def _block_mappings(levels: int) -> str:
    return "".join(" " * level + "a:\n" for level in range(levels - 1)) + " " * levels + "a: 1\n"


def _block_lists(levels: int) -> str:
    return (
        "".join(" " * (2 * level) + "-\n" for level in range(levels - 1))
        + " " * (2 * levels)
        + "- 1\n"
    )


def _block_mixture(levels: int) -> str:
    """Block mappings and lists in turn, with a flow list inside the deepest one."""
    lines, indent = [], 0
    for level in range(levels - 2):
        lines.append(" " * indent + ("a:" if level % 2 == 0 else "-"))
        indent += 2
    return "\n".join([*lines, " " * indent + "[[1]]"]) + "\n"


NESTINGS = {
    "flow lists": _flow_lists,
    "flow mappings": _flow_mappings,
    "flow lists and mappings in turn": _flow_mixture,
    "block mappings": _block_mappings,
    "block lists": _block_lists,
    "block mappings and lists with flow lists inside": _block_mixture,
}


@pytest.mark.parametrize("shape", NESTINGS)
def test_nesting_up_to_the_documented_limit_is_read(shape: str) -> None:
    docs = read_documents(NESTINGS[shape](MAX_DEPTH))
    node, depth = docs[0].data, 1
    while isinstance(node, list | dict):
        node = node[0] if isinstance(node, list) else node["a"]
        depth += 1
    assert depth == MAX_DEPTH + 1  # MAX_DEPTH collections, then the scalar inside them


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1_000, 1_001, 100_000])
@pytest.mark.parametrize("shape", NESTINGS)
def test_nesting_past_the_documented_limit_is_refused_by_trainop(shape: str, levels: int) -> None:
    """Whatever the YAML library's own limit (libyaml 0.2.6 refuses 1000 levels), trainop's
    limit and message come first, with the line and column where the limit was passed."""
    if levels > 1_001 and shape.startswith("block"):
        levels = 1_001  # each block level is a line of its own: 1001 lines say the same
    text = NESTINGS[shape](levels)
    message = ""

    def load() -> None:
        nonlocal message
        message = problem_of(text)

    within_bounds(load)
    assert f"mappings and lists are nested more than {MAX_DEPTH} levels deep (line " in message
    line, column = map(int, re.findall(r"\(line (\d+), column (\d+)\)", message)[0])
    assert 1 <= line <= MAX_DEPTH + 1 and column <= 4 * (MAX_DEPTH + 1)


def test_the_limit_does_not_depend_on_the_yaml_library_s_own() -> None:
    """A libyaml that supports it is given a limit far below trainop's: trainop's reader still
    reads what its own limit allows (it does not hand the text to libyaml)."""
    get = getattr(getattr(yaml, "_yaml", None), "_get_max_nest_level", None)
    set_ = getattr(getattr(yaml, "_yaml", None), "_set_max_nest_level", None)
    before = get() if get else None
    if set_:
        set_(5)
    try:
        assert read_documents(_flow_lists(MAX_DEPTH))[0].data
        assert f"more than {MAX_DEPTH} levels" in problem_of(_flow_lists(MAX_DEPTH + 1))
    finally:
        if set_ and before is not None:
            set_(before)


def test_a_billion_laughs_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "lol.yaml"
    path.write_text(billion_laughs(levels=12))
    within_bounds(lambda: problem_of(path), megabytes=32)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\xff\xfe\x00k\x00i", "is not UTF-8 text: byte 0xff at offset 0"),
        (b"kind: TFJob\nname: \xc3\x28\n", "byte 0xc3 at offset 18"),
    ],
    ids=["UTF-16 is refused", "a broken UTF-8 sequence is refused with its offset"],
)
def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(data)
    assert f"{path}: " in problem_of(path)
    assert expected in problem_of(path)


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + minimal_job("TFJob").yaml().encode())
    assert prepare(path)[1].name == "demo"


def test_an_endless_file_is_refused_after_reading_the_limit() -> None:
    message = ""

    def load() -> None:
        nonlocal message
        message = problem_of(Path("/dev/zero"))

    within_bounds(load, megabytes=2 * MAX_SOURCE_BYTES / 2**20 + 8)
    assert "/dev/zero: is larger than 3 MiB" in message


@pytest.mark.parametrize("how", ["file", "text", "stream", "binary stream"])
def test_every_source_has_the_same_size_limit(tmp_path: Path, how: str) -> None:
    text = minimal_job("TFJob").yaml() + "# " + "x" * MAX_SOURCE_BYTES + "\n"
    path = tmp_path / "big.yaml"
    path.write_text(text)
    sources = {
        "file": lambda: read_documents(path),
        "text": lambda: read_documents(text),
        "stream": lambda: read_stream(io.StringIO(text), "standard input"),
        "binary stream": lambda: read_stream(
            io.TextIOWrapper(io.BytesIO(text.encode())), "standard input"
        ),
    }
    with pytest.raises(InvalidJobError, match="is larger than 3 MiB"):
        sources[how]()


def test_a_lone_surrogate_in_text_is_refused() -> None:
    text = minimal_job("TFJob").yaml().replace("demo", "de\udc80mo")
    assert "not valid Unicode text: a lone surrogate" in problem_of(text)


@pytest.mark.parametrize(
    "source",
    ["job\x00.yaml", "x" * 5000, "\x00"],
    ids=["a NUL in a file name", "a one-line string longer than any path", "a lone NUL"],
)
def test_strings_that_cannot_be_file_names_are_read_as_text(source: str) -> None:
    with pytest.raises(InvalidJobError):
        load_jobs(source)


def _cyclic() -> dict[str, Any]:
    data = minimal_job("TFJob").build()
    data["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = data
    return data


def _deep() -> dict[str, Any]:
    data = minimal_job("TFJob").build()
    node = data["metadata"]
    for _ in range(10_000):
        node["x"] = {}
        node = node["x"]
    return data


def _wide() -> dict[str, Any]:
    shared: list[Any] = ["x"] * 100
    for _ in range(6):
        shared = [shared] * 100  # 10**12 values once expanded, a few KB in memory
    data = minimal_job("TFJob").build()
    data["metadata"]["labels"] = {"big": shared}
    return data


def _tuple_key() -> dict[str, Any]:
    data = minimal_job("TFJob").build()
    data["metadata"][("a", "b")] = 1  # type: ignore[index]
    return data


def _huge_int() -> dict[str, Any]:
    data = minimal_job("TFJob").build()
    data["spec"]["runPolicy"] = {"backoffLimit": 10**5000}
    return data


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_cyclic, "contains itself"),
        (_deep, f"nested more than {MAX_DEPTH} levels deep"),
        (_wide, f"more than {MAX_NODES} values"),
        (_tuple_key, "mapping key that is not a string"),
        (_huge_int, "an integer of more than 1000 digits"),
    ],
    ids=[
        "a dict that contains itself",
        "a dict nested 10000 deep",
        "a small dict sharing lists into 10**12 values",
        "a dict with a tuple key",
        "an integer of 5000 digits",
    ],
)
def test_hostile_data_built_in_code_is_refused(build: Any, expected: str) -> None:
    data = build()
    within_bounds(lambda: problem_of(data))
    assert expected in problem_of(data)


def test_a_dict_that_contains_itself_is_refused_naming_the_field() -> None:
    problem = problem_of(_cyclic())
    assert "spec.tfReplicaSpecs.Worker.template.metadata: contains itself" in problem
    assert "(refers back to the job itself)" in problem


def _template_loop(job: Any) -> None:
    template = job.spec.replica_specs["Worker"].template
    template["metadata"] = {"loop": template}


def _annotation_loop(job: Any) -> None:
    job.metadata.annotations = {"note": "x"}
    annotations = job.metadata.annotations
    annotations["again"] = [annotations]  # in place: no assignment validation sees it


@pytest.mark.parametrize(
    ("make_loop", "field", "back_to"),
    [
        (
            _template_loop,
            "spec.tfReplicaSpecs.Worker.template.metadata.loop",
            "spec.tfReplicaSpecs.Worker.template",
        ),
        (_annotation_loop, "metadata.annotations.again[0]", "metadata.annotations"),
    ],
    ids=["a pod template that contains itself", "annotations that contain themselves"],
)
def test_a_job_model_holding_a_cycle_is_refused_naming_the_field(
    make_loop: Any, field: str, back_to: str
) -> None:
    job = minimal_job("TFJob").job()
    make_loop(job)
    assert f"{field}: contains itself (refers back to {back_to})" in problem_of(job)


def test_timestamps_stay_strings_as_kubernetes_reads_them() -> None:
    job = minimal_job("TFJob").env("Worker", DAY="placeholder").yaml()
    job = job.replace("placeholder", "2024-01-02")
    _, prepared = prepare(job)
    env = prepared.spec.replica_specs["Worker"].template["spec"]["containers"][0]["env"]
    assert env == [{"name": "DAY", "value": "2024-01-02"}]


def test_a_merge_key_may_be_overridden_next_to_it() -> None:
    docs = read_documents("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")
    assert docs[0].data["other"] == {"x": 3, "y": 2}


def test_the_reader_uses_no_recursion_of_libyaml() -> None:
    """libyaml's own composer recurses in C and kills the interpreter on deep input (a segfault,
    not an exception); a deep document must therefore never reach it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    assert problem_of("[" * 1_000_000)  # would need a far bigger C stack than `soft`
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_STACK)
