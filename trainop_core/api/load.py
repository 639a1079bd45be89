"""Turn YAML, JSON, dicts or files into `TrainingJob`s, strictly, reporting every problem at once.

Loading checks shape only (known kind, apiVersion, field names, value types, pod templates); the
webhook's rules live in `api/validation.py` and `prepare` runs both. Bad input never escapes as a
traceback: it becomes `InvalidJobError` problems with wire (camelCase) field paths.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from trainop_core.api.cycles import cycle_problem
from trainop_core.api.job import API_VERSION, TrainingJob
from trainop_core.api.podtemplate import check_template, describe, join
from trainop_core.api.reader import check_tree, parse_yaml, read_file
from trainop_core.errors import InvalidJobError, Problem, TrainopError

if TYPE_CHECKING:
    from trainop_core.kinds.base import Kind

YAML_SUFFIXES = (".yaml", ".yml", ".json")
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: a longer one-line string is YAML text, not a file name
_TOP_ORDER = ("apiVersion", "kind", "metadata", "spec", "status")


class KindLookup(Protocol):
    """What loading needs from a kind registry (trainop_core.kinds.table.KindRegistry)."""

    def get(self, name: str) -> Kind:
        """The kind called `name` (case-insensitive, aliases accepted); raises if unknown."""
        ...

    @property
    def kinds(self) -> Sequence[Kind]:
        """Every registered kind, in table order."""
        ...


Source = str | Path | Mapping[str, Any] | TrainingJob


class InvalidJobsError(InvalidJobError):
    """Several documents of one source were invalid; `errors` holds one error per document."""

    def __init__(self, errors: Iterable[InvalidJobError]) -> None:
        self.errors = list(errors)
        first = self.errors[0] if self.errors else None
        super().__init__(
            [p for e in self.errors for p in e.problems],
            source=first.source if first else "",
            job=first.job if first else "",
        )

    def _render(self) -> str:
        return "\n".join(str(e) for e in self.errors)


@dataclass(frozen=True)
class Document:
    """One YAML document (or dict) and where it came from, for error messages."""

    data: Any
    source: str


@functools.cache
def default_registry() -> KindLookup:
    """The built-in kinds, entry-point kinds and the internal TrainJob kind, built once per
    process for convenience calls."""
    from trainop_core.kinds.table import build_registry
    from trainop_core.runtimes.kind import KIND as TRAINJOB

    # TrainJobs run as one internal kind (trainop_core.runtimes); it serves no v1 resource.
    registry: KindLookup = build_registry(extra=(TRAINJOB,))
    return registry


# --- reading -------------------------------------------------------------------------------------


def read_documents(source: str | Path | Mapping[str, Any]) -> list[Document]:
    """The non-empty documents of a file, a YAML/JSON text or a single mapping, within the limits
    of `trainop_core.api.reader` (size, encoding, values, nesting, duplicate keys)."""
    if not isinstance(source, str | Path):
        check_tree(source)  # a mapping, or anything parse_job will explain is wrong
        return [Document(source, "")]
    if isinstance(source, Path) or _looks_like_path(source):
        path = Path(source)
        return parse_text(read_file(path), str(path))
    return parse_text(source, "")


def _looks_like_path(text: str) -> bool:
    # One line that is not a YAML/JSON mapping or list: a file name (a missing one is reported).
    if not text.strip() or "\n" in text or text.lstrip().startswith(("{", "[")):
        return False
    if "\0" in text or len(text) > MAX_PATH_CHARS:
        return False  # no file can have that name: it is text
    return text.endswith(YAML_SUFFIXES) or _is_file(text) or ": " not in text


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for this file system
        return False


def parse_text(text: str, origin: str) -> list[Document]:
    """The non-empty documents of YAML/JSON text; `origin` names it in messages."""
    raw = parse_yaml(text, origin)
    multi = len(raw) > 1
    return [
        Document(data, _doc_source(origin, index) if multi else origin)
        for index, data in enumerate(raw, start=1)
        if data is not None
    ]


def model_data(job: TrainingJob) -> dict[str, Any]:
    """A job model built in code as wire data, checked like any other source (a template may hold
    a value that contains itself, which the model cannot even dump: refused naming the field)."""
    cycle = cycle_problem(job)
    if cycle is not None:
        raise InvalidJobError([cycle], job=f"{job.kind}/{job.name}")
    try:
        data = job.to_dict()
    except ValueError as err:  # pydantic: "Circular reference detected"
        raise InvalidJobError([Problem("", f"the job cannot be read: {err}")]) from None
    check_tree(data)
    return data


def client_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object read from a server as a client wrote it: no status, and none of the metadata the
    server keeps for itself (managedFields, selfLink), so it is checked like a file."""
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("managedFields", "selfLink")
    }
    return {k: v for k, v in obj.items() if k != "status"} | {"metadata": meta}


def _doc_source(origin: str, index: int) -> str:
    return f"{origin} (document {index})" if origin else f"document {index}"


# --- parsing -------------------------------------------------------------------------------------


def load_jobs(source: Source, *, registry: KindLookup | None = None) -> list[TrainingJob]:
    """Every job in `source` (file path, YAML/JSON text, mapping or job); all problems at once.

    Raises InvalidJobError (InvalidJobsError when several documents are bad).
    """
    if isinstance(source, TrainingJob):
        return [source]
    jobs: list[TrainingJob] = []
    errors: list[InvalidJobError] = []
    for doc in read_documents(source):
        try:
            jobs.append(parse_document(doc, registry))
        except InvalidJobError as err:
            errors.append(err)
    raise_all(errors)
    return jobs


def load_job(source: Source, *, registry: KindLookup | None = None) -> TrainingJob:
    """The one job in `source`; zero or several jobs are an error."""
    return exactly_one(load_jobs(source, registry=registry), source)


T = TypeVar("T")


def exactly_one(items: list[T], source: Source) -> T:
    """The single item loaded from `source`, else InvalidJobError naming how many there were."""
    if len(items) == 1:
        return items[0]
    is_file = isinstance(source, Path) or (isinstance(source, str) and _looks_like_path(source))
    found = f"{len(items)} jobs" if items else "no job"
    problem = Problem("", f"expected exactly one job, found {found}")
    raise InvalidJobError([problem], source=str(source) if is_file else "")


def raise_all(errors: list[InvalidJobError]) -> None:
    """Raise the one error, or all of them together; nothing when the list is empty."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise InvalidJobsError(errors)


def parse_document(doc: Document, registry: KindLookup | None = None) -> TrainingJob:
    try:
        return parse_job(doc.data, registry)
    except InvalidJobError as err:
        raise InvalidJobError(err.problems, source=doc.source, job=err.job) from None


def parse_job(data: Any, registry: KindLookup | None = None) -> TrainingJob:
    """The job model for `data`'s kind, checked strictly; raises InvalidJobError with every problem.

    `kind` is matched case-sensitively as on Kubernetes; an alias (MXNetJob) is stored as its kind.
    """
    if not isinstance(data, Mapping):
        expected = "a mapping with apiVersion, kind, metadata and spec"
        raise InvalidJobError([Problem("", f"expected {expected}, got {describe(data)}")])
    kind, problems = resolve_kind(data, registry or default_registry())
    problems += _check_api_version(data)
    if kind is None:
        raise InvalidJobError(problems, job=job_label(data))
    wire = {**data, "kind": kind.kind}
    job, model_problems = _validate_model(kind.job_model, wire)
    problems += [p for p in model_problems if p.path != "apiVersion"]  # said better above
    problems += template_problems(wire, kind.replica_field)
    if problems or job is None:
        raise InvalidJobError(problems, job=job_label(wire))
    return job


def resolve_kind(
    data: Mapping[str, Any], registry: KindLookup
) -> tuple[Kind | None, list[Problem]]:
    name = data.get("kind")
    known = ", ".join(kind_names(registry))
    if name is None:
        return None, [Problem("kind", f"required field is missing; expected one of {known}")]
    if not isinstance(name, str):
        return None, [Problem("kind", f"expected one of {known}, got {describe(name)}")]
    try:
        kind: Kind | None = registry.get(name)
    except (LookupError, TrainopError):
        kind = None
    if kind is not None and (name == kind.kind or name in kind.aliases):
        return kind, []
    hint = f' (kinds are case-sensitive: did you mean "{kind.kind}"?)' if kind else ""
    return None, [Problem("kind", f"unknown kind {describe(name)}; expected one of {known}{hint}")]


def kind_names(registry: KindLookup) -> list[str]:
    return [kind.kind for kind in registry.kinds]


def _check_api_version(data: Mapping[str, Any]) -> list[Problem]:
    version = data.get("apiVersion")
    if version is None:
        return [Problem("apiVersion", f'required field is missing; expected "{API_VERSION}"')]
    if version != API_VERSION:
        return [Problem("apiVersion", f'expected "{API_VERSION}", got {describe(version)}')]
    return []


def _validate_model(
    model: type[TrainingJob], wire: Mapping[str, Any]
) -> tuple[TrainingJob | None, list[Problem]]:
    # Strict JSON validation behaves like the API server: "3" is not an integer, yet enum values
    # and RFC 3339 strings are accepted. JSON mode ignores by_name=False, so a second, Python-mode
    # pass finds Python field names used instead of wire names (run_policy for runPolicy).
    text = json.dumps(wire, default=_json_default)
    problems: list[Problem] = []
    try:
        job = model.model_validate_json(text, strict=True)
    except ValidationError as err:
        job, problems = None, translate(err, wire)
    try:
        model.model_validate(json.loads(text), by_alias=True, by_name=False)
    except ValidationError as err:
        extra = [e for e in err.errors(include_url=False) if e["type"] == "extra_forbidden"]
        known = {p.path for p in problems}
        problems += [p for p in translate_errors(extra, wire) if p.path not in known]
        job = None if extra else job
    return job, problems


def translate(err: ValidationError, data: Any) -> list[Problem]:
    return translate_errors(err.errors(include_url=False), data)


def translate_errors(errors: Iterable[Any], data: Any) -> list[Problem]:
    """Pydantic errors as Problems on wire paths; a union's several errors become one problem."""
    grouped: dict[str, list[Any]] = {}
    for error in errors:
        grouped.setdefault(_wire_path(error["loc"], data), []).append(error)
    return [Problem(path, _message(errs)) for path, errs in grouped.items()]


def _wire_path(loc: tuple[Any, ...], data: Any) -> str:
    # Walk the input alongside the location: items that are not keys or indices of the input
    # (union member tags like "str", validator names) are pydantic's, not the user's.
    path, node = "", data
    for position, item in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(node, Mapping) and item in node:
            path, node = join(path, str(item)), node[item]
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            path, node = f"{path}[{item}]", node[item]
        elif last and isinstance(item, str) and isinstance(node, Mapping):
            path = join(path, item)  # a missing field: not in the input by definition
    return path


def _message(errors: list[Any]) -> str:
    first = errors[0]
    if first["type"] == "missing":
        return "required field is missing"
    if first["type"] == "extra_forbidden":
        key = str(first["loc"][-1])
        return f'unknown field (did you mean "{to_camel(key)}"?)' if "_" in key else "unknown field"
    if first["type"] in _BOUNDS:
        return str(_BOUNDS[first["type"]](first.get("ctx") or {}, first.get("input")))
    expected = list(dict.fromkeys(_expected(e) for e in errors))
    if "a number" in expected and "an integer" in expected:
        expected.remove("an integer")  # every integer is a number
    return f"expected {' or '.join(expected)}, got {describe(first.get('input'))}"


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | dict) else 0


# Bounds a model sets on a field (maxLength, maxItems, pattern: the CRD's own), worded as rules.
_BOUNDS: dict[str, Any] = {
    "string_too_long": lambda c, v: f"must be at most {c['max_length']} characters, got {_size(v)}",
    "string_too_short": lambda c, v: (
        "must not be empty"
        if c["min_length"] == 1
        else f"must be at least {c['min_length']} characters, got {_size(v)}"
    ),
    "too_long": lambda c, v: f"must have at most {c['max_length']} items, got {_size(v)}",
    "too_short": lambda c, v: f"must have at least {c['min_length']} items, got {_size(v)}",
    "string_pattern_mismatch": lambda c, v: f"must match {c['pattern']}, got {describe(v)}",
}


def _expected(error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in ("enum", "literal_error"):
        values = str(ctx.get("expected", "")).replace("' or '", "', '").split("', '")
        return "one of " + ", ".join(v.strip("'") or '""' for v in values)
    if kind == "greater_than_equal":
        return f"an integer >= {ctx.get('ge')}"
    if kind.startswith("datetime"):
        return "an RFC 3339 time such as 2024-01-02T03:04:05Z"
    return _EXPECTED.get(
        kind, str(error.get("msg", "a valid value")).removeprefix("Input should be ")
    )


def _json_default(value: Any) -> Any:
    # YAML turns unquoted timestamps into datetimes; the models read them back from strings.
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)


def template_problems(wire: Mapping[str, Any], replica_field: str) -> list[Problem]:
    """Pod-template shape problems of every replica (templates are plain data in the models)."""
    spec = wire.get("spec")
    specs = spec.get(replica_field) if isinstance(spec, Mapping) else None
    if not isinstance(specs, Mapping):
        return []
    problems: list[Problem] = []
    for rtype, replica in specs.items():
        template = replica.get("template") if isinstance(replica, Mapping) else None
        if isinstance(template, Mapping):
            problems += check_template(template, f"spec.{replica_field}.{rtype}.template")
    return problems


def job_label(data: Mapping[str, Any]) -> str:
    """KIND/NAME for messages, as far as the document tells."""
    kind = data.get("kind") if isinstance(data.get("kind"), str) else ""
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(name, str) and name:
        return f"{kind}/{name}" if kind else name
    return str(kind)


# --- dumping -------------------------------------------------------------------------------------


def to_wire(job: TrainingJob) -> dict[str, Any]:
    """The job as a user would write it: apiVersion, kind, metadata, spec (and status if any);
    a TrainJob as Trainer's API stores it (`as_stored`), so that it can be applied again."""
    data = job.as_stored() or job.to_dict()
    data.setdefault("apiVersion", API_VERSION)
    if data.get("spec", {}).get("runPolicy") == {}:
        del data["spec"]["runPolicy"]  # the model's default, not something the user wrote
    ordered = {key: data.pop(key) for key in _TOP_ORDER if key in data}
    return {**ordered, **data}


def dump_yaml(jobs: TrainingJob | Iterable[TrainingJob]) -> str:
    """YAML for one job, or a multi-document stream for several."""
    return yaml.safe_dump_all(
        [to_wire(job) for job in _as_list(jobs)], sort_keys=False, default_flow_style=False
    )


def dump_json(job: TrainingJob) -> str:
    return json.dumps(to_wire(job), indent=2) + "\n"


def _as_list(jobs: TrainingJob | Iterable[TrainingJob]) -> Iterator[TrainingJob]:
    if isinstance(jobs, TrainingJob):
        yield jobs
    else:
        yield from jobs
