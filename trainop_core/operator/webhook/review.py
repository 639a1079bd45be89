"""Admission reviews (admission.k8s.io/v1) for the training jobs: pure functions from a request
to a response, on the same read → default → validate path as `trainop validate` and the
controller (`trainop_core.api.validation.prepare`).

- validating (CREATE, UPDATE): every problem at once, each with its field path, in a 422
  `Invalid` status; upstream's webhook warnings (deprecated fields) as AdmissionReview warnings;
  on UPDATE `spec.runPolicy.managedBy` may not change, for every kind (two of upstream's
  webhooks compare the new object with itself and miss it: docs/upstream-differences.md). A job
  being deleted is let through, so an invalid job stored before the webhook existed can still
  be deleted.
- mutating ("defaulting", CREATE, UPDATE): a JSON Patch that writes the defaults into the stored
  spec (upstream has none: its defaults stay in the reconciler's memory). The patch turns the
  spec into the defaulted model's, so besides the defaults it may drop a null field or spell a
  replica type the kind's way (worker -> Worker). A job that cannot even be read gets no patch;
  the validating webhook then refuses it with every problem.
- Trainer v2 (`validate_v2`: TrainJob, TrainingRuntime, ClusterTrainingRuntime; validating only,
  CREATE and UPDATE): the checks of `trainop validate` (`api.trainjob_validation.parse_v2`), and
  those that need the runtime a TrainJob names when the operator's caches hold it
  (`runtimes.prepare.prepare_trainjob`: env its ML policy reserves, the planned job's rules); on
  UPDATE a TrainJob's `spec.managedBy` may not change (Trainer's rule). The runtime a TrainJob
  names need not exist yet (the reconciler waits for it); a runtimeRef of another kind or
  apiGroup is refused. There is no v2 defaulting webhook: Trainer's defaults are in the CRDs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.admission import admission_warnings
from trainop_core.api.defaults import apply_defaults
from trainop_core.api.load import Document, KindLookup, parse_job
from trainop_core.api.reader import check_tree
from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB, too_many_replicas, whose_limit
from trainop_core.runtimes.catalog import RuntimeCatalog, RuntimeNotFoundError

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
CHECKED = ("CREATE", "UPDATE")
MAX_WARNING = 256  # characters; kube-apiserver truncates longer ones


class BadReview(ValueError):
    """The body is not an AdmissionReview request (HTTP 400)."""


def request_of(body: Any) -> dict[str, Any]:
    """The `request` of an AdmissionReview body; BadReview naming the first field that is not
    what kube-apiserver sends (a review is read only once its request has the right shape)."""
    if not isinstance(body, Mapping) or body.get("kind") != KIND:
        raise BadReview(f"expected an {API_VERSION} {KIND}")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise BadReview(f"request: must be an object, got {_json_type(request)}")
    for problem in _request_problems(request):
        raise BadReview(problem)
    return dict(request)


# What a review reads of its request, and what kube-apiserver always sends there.
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
_GVK = ("group", "version", "kind")


def _request_problems(request: Mapping[str, Any]) -> Iterator[str]:
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        yield f"request.uid: must be a non-empty string, got {_json_type(uid)}"
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or not all(isinstance(kind.get(k), str) for k in _GVK):
        yield f"request.kind: must be an object of strings {_GVK}, got {_json_type(kind)}"
    operation = request.get("operation")
    if operation not in _OPERATIONS:
        yield f"request.operation: must be one of {', '.join(_OPERATIONS)}, got {_shown(operation)}"
    for key in ("namespace", "name"):
        if not isinstance(request.get(key, ""), str):
            yield f"request.{key}: must be a string, got {_json_type(request[key])}"
    for key in ("object", "oldObject"):
        value = request.get(key)
        if value is not None and not isinstance(value, Mapping):
            yield f"request.{key}: must be an object or null, got {_json_type(value)}"


def _json_type(value: Any) -> str:
    """How JSON calls the type of `value` (never the value: it is the caller's data)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return next((name for t, name in names.items() if isinstance(value, t)), "something else")


def _shown(value: Any) -> str:
    return json.dumps(value)[:40] if isinstance(value, str) else _json_type(value)


def validate(
    request: Mapping[str, Any], registry: KindLookup, max_replicas: int = MAX_REPLICAS_PER_JOB
) -> dict[str, Any]:
    """The validating webhook's response to `request`; a job of more than `max_replicas`
    replicas in all is refused (`operator.jobsize`)."""
    job = _object(request)
    if request.get("operation") not in CHECKED or _being_deleted(job):
        return _response(request, True)
    problems: list[Problem] = []
    warnings: list[str] = []
    try:
        kind, model = prepare(job, registry=registry)
        problems = too_many_replicas(model, kind, max_replicas)
        warnings = [str(w)[:MAX_WARNING] for w in admission_warnings(model, kind)]
    except InvalidJobError as err:
        problems = list(err.problems)
    if request.get("operation") == "UPDATE":
        old = request.get("oldObject")
        problems += _changed(old, job, ("spec", "runPolicy", "managedBy"))
    if problems:
        return _response(request, False, status=_invalid(request, job, problems))
    return _response(request, True, warnings=warnings)


def validate_v2(
    request: Mapping[str, Any],
    registry: KindLookup,
    runtimes: RuntimeCatalog | None = None,
    max_replicas: int = MAX_REPLICAS_PER_JOB,
) -> dict[str, Any]:
    """The validating webhook's response to a Trainer v2 `request`, a TrainJob checked with its
    runtime too when `runtimes` holds it (`registry` is unused: the runtimes are not kinds), and
    refused above `max_replicas` replicas in all."""
    del registry
    obj = _object(request)
    if request.get("operation") not in CHECKED or _being_deleted(obj):
        return _response(request, True)
    problems: list[Problem] = []
    try:
        check_tree(obj)
        parsed = parse_v2(obj)
        if isinstance(parsed, v2.TrainJob):
            problems = _trainjob_size(obj, parsed, runtimes, max_replicas)
    except InvalidJobError as err:
        problems = list(err.problems)
    expected = (request.get("kind") or {}).get("kind")
    got = obj.get("kind") if isinstance(obj, Mapping) else None
    if expected and got != expected and not any(p.path == "kind" for p in problems):
        problems.append(Problem("kind", f"expected {json.dumps(expected)}, got {json.dumps(got)}"))
    if request.get("operation") == "UPDATE" and expected == "TrainJob":
        problems += _changed(request.get("oldObject"), obj, ("spec", "managedBy"))
    if problems:
        return _response(request, False, status=_invalid(request, obj, problems))
    return _response(request, True)


def _trainjob_size(
    obj: Mapping[str, Any], job: v2.TrainJob, runtimes: RuntimeCatalog | None, limit: int
) -> list[Problem]:
    """Raises InvalidJobError with the problems the TrainJob has with the runtime it names, if
    that runtime is known yet (else the reconciler waits for it); returns the problem of a job
    larger than `limit` replicas, from the planned job when the runtime is known, else from
    `spec.trainer.numNodes` alone (a lower bound of its replicas)."""
    from trainop_core.runtimes.prepare import prepare_trainjob

    if runtimes is not None:
        try:
            kind, planned = prepare_trainjob(Document(dict(obj), ""), runtimes)
            return too_many_replicas(planned, kind, limit)
        except RuntimeNotFoundError:
            pass
    nodes = job.spec.trainer.num_nodes if job.spec.trainer else None
    if nodes is None or nodes <= limit:
        return []
    message = f"the job has at least {nodes} replicas; {whose_limit(limit)}"
    return [Problem("spec.trainer.numNodes", message)]


def mutate(request: Mapping[str, Any], registry: KindLookup) -> dict[str, Any]:
    """The defaulting webhook's response to `request`: the defaults as a JSON Patch."""
    import jsonpatch

    job = _object(request)
    if request.get("operation") not in CHECKED or _being_deleted(job):
        return _response(request, True)
    try:
        check_tree(job)  # the same bounds as any job source, before anything else reads it
        parsed = parse_job(job, registry)
    except InvalidJobError:
        return _response(request, True)
    defaulted = apply_defaults(parsed, registry.get(parsed.kind))
    # From the spec as sent to the defaulted model's: the defaults, and the model's canonical
    # form of the same values (a null field left out, `runPolicy: {}` where there was none).
    before, after = job["spec"], defaulted.to_dict()["spec"]
    ops = [_under_spec(op) for op in jsonpatch.make_patch(before, after).patch]
    return _response(request, True, patch=ops)


# --- helpers -------------------------------------------------------------------------------------
def _object(request: Mapping[str, Any]) -> Any:
    """The request's object, with the request's namespace when it names none."""
    job = request.get("object")
    if isinstance(job, Mapping) and isinstance(job.get("metadata"), Mapping):
        meta = dict(job["metadata"])
        if not meta.get("namespace") and isinstance(request.get("namespace"), str):
            meta["namespace"] = request["namespace"]
        return {**job, "metadata": meta}
    return job


def _being_deleted(job: Any) -> bool:
    meta = job.get("metadata") if isinstance(job, Mapping) else None
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


def _changed(old: Any, new: Any, path: tuple[str, ...]) -> list[Problem]:
    """An immutable field's problem when the value at `path` differs (absent is None)."""
    before, after = _at(old, path), _at(new, path)
    if before == after:
        return []
    message = f"field is immutable (was {json.dumps(before)}, now {json.dumps(after)})"
    return [Problem(".".join(path), message)]


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def _under_spec(op: dict[str, Any]) -> dict[str, Any]:
    moved = {**op, "path": "/spec" + op["path"]}
    if "from" in op:
        moved["from"] = "/spec" + op["from"]
    return moved


def _invalid(request: Mapping[str, Any], job: Any, problems: list[Problem]) -> dict[str, Any]:
    """A 422 Invalid status, worded as the API server words its own validation errors."""
    kind = request.get("kind") or {}
    meta = job.get("metadata") if isinstance(job, Mapping) else None
    name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
    what = f'{kind.get("kind", "job")}.{kind.get("group", "kubeflow.org")} "{name}"'
    return {
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": f"{what} is invalid: " + "; ".join(str(p) for p in problems),
        "details": {
            "name": name,
            "group": kind.get("group", ""),
            "kind": kind.get("kind", ""),
            "causes": [
                {"reason": "FieldValueInvalid", "field": p.path, "message": p.message}
                for p in problems
            ],
        },
    }


def _response(
    request: Mapping[str, Any],
    allowed: bool,
    *,
    status: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
    patch: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": request["uid"], "allowed": allowed}
    if status is not None:
        response["status"] = status
    if warnings:
        response["warnings"] = warnings
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
