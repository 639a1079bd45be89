"""Reading and validating TrainJobs and training runtimes: every problem at once, named by field.

The same path as the v1 kinds: bounded reading (`api.reader`), strict model validation (wire
paths through `api.load.translate`), then Trainer's admission rules. Kubernetes-typed parts are
checked against the Kubernetes field table (`api.podtemplate`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from trainop_core.api import trainjob as v2
from trainop_core.api.bounds import (
    INT32,
    INT64,
    env_problems,
    int_range,
    pod_problems,
    template_number_problems,
)
from trainop_core.api.load import read_documents, translate
from trainop_core.api.podtemplate import check_template, check_value, describe, join
from trainop_core.api.validation import check_metadata
from trainop_core.errors import InvalidJobError, Problem

V2Object = v2.TrainJob | v2.TrainingRuntime

# The pod-spec fields a runtime patch may set (Trainer v2.3's PodSpecPatch), and a container's.
PATCH_POD_FIELDS = (
    "affinity",
    "containers",
    "imagePullSecrets",
    "initContainers",
    "nodeSelector",
    "schedulingGates",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "tolerations",
    "volumes",
)
PATCH_CONTAINER_FIELDS = ("name", "env", "securityContext", "volumeMounts")
# Containers whose env only the Trainer and Initializer APIs may set (Trainer's rule).
RESERVED_CONTAINERS = (v2.NODE, "dataset-initializer", "model-initializer")


def is_v2(data: Any) -> bool:
    """Whether a document is addressed to Trainer v2's API group."""
    version = data.get("apiVersion") if isinstance(data, Mapping) else None
    return isinstance(version, str) and version.split("/")[0] == v2.GROUP


def load_v2(source: str | Any) -> list[V2Object]:
    """Every TrainJob and runtime in a file, text or mapping; InvalidJobError with all problems."""
    objects: list[V2Object] = []
    for doc in read_documents(source):
        try:
            objects.append(parse_v2(doc.data))
        except InvalidJobError as err:
            raise InvalidJobError(err.problems, source=doc.source, job=err.job) from None
    return objects


def parse_v2(data: Any) -> V2Object:
    """One TrainJob or runtime, validated; raises InvalidJobError naming every bad field."""
    if not isinstance(data, Mapping):
        raise InvalidJobError([Problem("", f"expected a mapping, got {describe(data)}")])
    kind = data.get("kind")
    label = f"{kind}/{(data.get('metadata') or {}).get('name', '')}"
    model = v2.MODELS.get(kind) if isinstance(kind, str) else None
    problems = _api_version_problems(data)
    if model is None:
        known = ", ".join(v2.MODELS)
        problems.append(Problem("kind", f"expected one of {known}, got {describe(kind)}"))
        raise InvalidJobError(problems, job=label)
    obj, model_problems = _strict(model, data)
    problems += [p for p in model_problems if p.path != "apiVersion"]
    if obj is not None:
        problems += validate_v2(obj)
    if problems or obj is None:
        raise InvalidJobError(problems, job=label)
    return obj


def validate_v2(obj: V2Object) -> list[Problem]:
    """Trainer's admission rules for a TrainJob or a runtime (the model is already well-typed)."""
    problems = check_metadata(obj.metadata.name, obj.metadata.namespace)
    problems += integer_problems(obj.spec, "spec")
    if isinstance(obj, v2.TrainJob):
        return problems + trainjob_problems(obj.spec)
    # A runtime names no pods: any object name goes (a DNS subdomain: torchtune-llama3.2-1b).
    problems = [p for p in problems if p.path != "metadata.name"] + _subdomain(obj.metadata.name)
    return problems + runtime_problems(obj.spec)


def integer_problems(model: BaseModel, path: str) -> list[Problem]:
    """Every integer field out of the range its Go type holds (the int32 and int64 markers of
    `api.trainjob`), as the API server refuses it: checked before anything is planned from it."""
    problems: list[Problem] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        where = join(path, info.alias or name)
        width = _width(info)
        if width is not None and isinstance(value, int) and not isinstance(value, bool):
            problems += int_range(value, where, width)
        for index, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                at = f"{where}[{index}]" if isinstance(value, list) else where
                problems += integer_problems(item, at)
    return problems


def _width(info: FieldInfo) -> tuple[int, int] | None:
    """INT32 or INT64 where the field's markers say its Go type is one (`v2.Int32` sits inside
    an Optional: its marker is found in the annotation)."""
    found = [
        info.json_schema_extra,
        *(getattr(m, "json_schema_extra", None) for m in info.metadata),
    ]
    pending: list[Any] = [info.annotation]
    while pending:
        annotation = pending.pop()
        if get_origin(annotation) is Annotated:
            found += [getattr(m, "json_schema_extra", None) for m in annotation.__metadata__]
        pending += get_args(annotation)
    formats = {extra.get("format") for extra in found if isinstance(extra, dict)}
    return INT64 if "int64" in formats else INT32 if "int32" in formats else None


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _subdomain(name: str | None) -> list[Problem]:
    if not name:
        return [Problem("metadata.name", "required field is missing")]
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        message = (
            f"{describe(name)} is not a valid DNS subdomain: lowercase letters, digits, '-' and "
            "'.', each part starting and ending with a letter or digit, at most 253 characters"
        )
        return [Problem("metadata.name", message)]
    return []


def _api_version_problems(data: Mapping[str, Any]) -> list[Problem]:
    if data.get("apiVersion") == v2.API_VERSION:
        return []
    got = describe(data.get("apiVersion"))
    return [Problem("apiVersion", f'expected "{v2.API_VERSION}", got {got}')]


def _strict(
    model: type[V2Object], data: Mapping[str, Any]
) -> tuple[V2Object | None, list[Problem]]:
    """The model and the problems of its typing and bounds. As for the v1 kinds, strict JSON
    validation is the API server's typing ("3" is no integer). With fields out of bounds, the
    model of the rest (those fields left out), so that Trainer's rules still find every other
    problem; None if even that is not a model."""
    try:
        return model.model_validate_json(json.dumps(data, default=str), strict=True), []
    except ValidationError as err:
        problems = translate(err, data)
        rest = _without(data, [error["loc"] for error in err.errors()])
    try:
        return model.model_validate_json(json.dumps(rest, default=str), strict=True), problems
    except ValidationError:
        return None, problems


def _without(data: Mapping[str, Any], locations: list[tuple[Any, ...]]) -> dict[str, Any]:
    """A copy of `data` without the field each location ends in (a list with all of it)."""
    rest = copy.deepcopy(dict(data))
    for location in locations:
        parents: list[tuple[Any, Any]] = []
        node: Any = rest
        for step in location:
            if _has(node, step):
                parents.append((node, step))
                node = node[step]
        while parents and isinstance(parents[-1][0], list):
            parents.pop()  # an item: leave out the whole list, indices stay true
        if parents:
            holder, key = parents[-1]
            holder.pop(key, None)
    return rest


def _has(node: Any, step: Any) -> bool:
    if isinstance(node, list):
        return isinstance(step, int) and 0 <= step < len(node)
    return isinstance(node, dict) and step in node


# --- TrainJob ------------------------------------------------------------------------------------


def trainjob_problems(spec: v2.TrainJobSpec) -> list[Problem]:
    problems = _runtime_ref_problems(spec.runtime_ref)
    if spec.managed_by is not None and spec.managed_by not in v2.MANAGED_BY_VALUES:
        expected = ", ".join(v2.MANAGED_BY_VALUES)
        problems.append(
            Problem(
                "spec.managedBy", f"expected one of {expected}, got {describe(spec.managed_by)}"
            )
        )
    if spec.trainer is not None:
        problems += _trainer_problems(spec.trainer)
    if spec.initializer is not None and (spec.initializer.dataset or spec.initializer.model):
        message = "initializers are not supported by trainop yet (no dataset/model step runs)"
        problems.append(Problem("spec.initializer", message))
    for index, patch in enumerate(spec.runtime_patches or []):
        problems += _patch_problems(patch, f"spec.runtimePatches[{index}]")
    managers = [p.manager for p in spec.runtime_patches or []]
    for index, manager in enumerate(managers):
        if manager in managers[:index]:
            message = f"manager {describe(manager)} has more than one patch"
            problems.append(Problem(f"spec.runtimePatches[{index}].manager", message))
    return problems


def _runtime_ref_problems(ref: v2.RuntimeRef) -> list[Problem]:
    # A name no runtime can have (runtimes are named by DNS subdomains) never resolves: refused
    # here, before it reaches a lookup or a message, rather than waited for.
    problems = [Problem("spec.runtimeRef.name", p.message) for p in _subdomain(ref.name)]
    if ref.api_group != v2.GROUP:
        message = f'expected "{v2.GROUP}", got {describe(ref.api_group)}'
        problems.append(Problem("spec.runtimeRef.apiGroup", message))
    if ref.kind not in v2.RUNTIME_KINDS:
        message = f"expected one of {', '.join(v2.RUNTIME_KINDS)}, got {describe(ref.kind)}"
        problems.append(Problem("spec.runtimeRef.kind", message))
    return problems


def _trainer_problems(trainer: v2.Trainer) -> list[Problem]:
    path = "spec.trainer"
    problems = _positive(f"{path}.numNodes", trainer.num_nodes)
    problems += _positive(f"{path}.numProcPerNode", trainer.num_proc_per_node)
    problems += check_value(trainer.env, "list[V1EnvVar]", f"{path}.env")
    problems += env_name_problems(trainer.env, f"{path}.env")
    problems += check_value(
        trainer.resources_per_node, "V1ResourceRequirements", f"{path}.resourcesPerNode"
    )
    problems += _image_problems(trainer.image, f"{path}.image")
    for name in ("command", "args"):
        for index, arg in enumerate(getattr(trainer, name) or []):
            if "\0" in arg:  # no process can be given it (exec takes C strings)
                problems.append(Problem(f"{path}.{name}[{index}]", "must not contain a NUL byte"))
    for index, entry in enumerate(trainer.env or []):
        value = entry.get("value") if isinstance(entry, Mapping) else None
        if isinstance(value, str) and "\0" in value:  # ... nor an environment
            problems.append(Problem(f"{path}.env[{index}].value", "must not contain a NUL byte"))
    return problems


def _image_problems(image: str | None, path: str) -> list[Problem]:
    # kube-apiserver's rule (no leading or trailing whitespace), and no control characters:
    # no image reference holds one.
    if image is None:
        return []
    if image != image.strip():
        return [Problem(path, "must not have leading or trailing whitespace")]
    if any(ord(c) < 32 or ord(c) == 127 for c in image):
        return [Problem(path, f"{describe(image)}: an image reference holds no control characters")]
    return []


def env_name_problems(env: Any, path: str) -> list[Problem]:
    """Env names as the API server checks them (printable ASCII without "="), each name once
    (a list keyed by name: the API server refuses a duplicate key)."""
    problems = env_problems(env, path)
    seen: dict[str, int] = {}
    for index, entry in enumerate(env if isinstance(env, list) else []):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name in seen:
            problems.append(
                Problem(f"{path}[{index}].name", f"duplicates {path}[{seen[name]}].name")
            )
        if isinstance(name, str):
            seen.setdefault(name, index)
    return problems


def _positive(path: str, value: int | None) -> list[Problem]:
    if value is not None and value < 1:
        return [Problem(path, f"must be at least 1, got {value}")]
    return []


def _patch_problems(patch: v2.RuntimePatch, path: str) -> list[Problem]:
    spec = patch.training_runtime_spec
    if spec is None:
        return []
    base = f"{path}.trainingRuntimeSpec"
    problems = _only(spec, ("template",), base)
    template = spec.get("template") or {}
    problems += _only(template, ("metadata", "spec"), f"{base}.template")
    problems += _meta_problems(template.get("metadata"), f"{base}.template.metadata")
    jobs = (template.get("spec") or {}).get("replicatedJobs") or []
    problems += _only(template.get("spec") or {}, ("replicatedJobs",), f"{base}.template.spec")
    for index, job in enumerate(jobs if isinstance(jobs, list) else []):
        problems += _job_patch_problems(job, f"{base}.template.spec.replicatedJobs[{index}]")
    return problems


def _job_patch_problems(job: Any, path: str) -> list[Problem]:
    if not isinstance(job, Mapping) or not isinstance(job.get("name"), str):
        return [Problem(f"{path}.name", "required field is missing")]
    problems = _only(job, ("name", "template"), path)
    job_template = job.get("template") or {}
    problems += _only(job_template, ("metadata", "spec"), f"{path}.template")
    problems += _meta_problems(job_template.get("metadata"), f"{path}.template.metadata")
    pod = (job_template.get("spec") or {}).get("template") or {}
    pod_path = f"{path}.template.spec.template"
    problems += _only(pod, ("metadata", "spec"), pod_path)
    problems += _meta_problems(pod.get("metadata"), f"{pod_path}.metadata")
    pod_spec = pod.get("spec") or {}
    problems += _only(pod_spec, PATCH_POD_FIELDS, f"{pod_path}.spec")
    for field in ("containers", "initContainers"):
        for index, container in enumerate(pod_spec.get(field) or []):
            problems += _container_patch_problems(container, f"{pod_path}.spec.{field}[{index}]")
    allowed = {k: v for k, v in pod_spec.items() if k in PATCH_POD_FIELDS}
    allowed.pop("containers", None)
    allowed.pop("initContainers", None)
    return problems + check_value(allowed, "V1PodSpec", f"{pod_path}.spec")


def _container_patch_problems(container: Any, path: str) -> list[Problem]:
    if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
        return [Problem(f"{path}.name", "required field is missing")]
    problems = _only(container, PATCH_CONTAINER_FIELDS, path)
    if container.get("env") and container["name"] in RESERVED_CONTAINERS:
        message = f'env of container "{container["name"]}" is set through spec.trainer.env'
        problems.append(Problem(f"{path}.env", message))
    rest = {k: v for k, v in container.items() if k in PATCH_CONTAINER_FIELDS}
    return problems + check_value(rest, "V1Container", path)


def _meta_problems(meta: Any, path: str) -> list[Problem]:
    if meta is None:
        return []
    if not isinstance(meta, Mapping):
        return [Problem(path, f"expected a mapping, got {describe(meta)}")]
    problems = _only(meta, ("labels", "annotations"), path)
    return problems + check_value(
        {k: meta[k] for k in ("labels", "annotations") if k in meta}, "V1ObjectMeta", path
    )


def _only(value: Any, allowed: tuple[str, ...], path: str) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem(path, f"expected a mapping, got {describe(value)}")]
    expected = ", ".join(allowed)
    return [
        Problem(join(path, str(key)), f"may not be patched (allowed: {expected})")
        for key in value
        if key not in allowed
    ]


# --- runtimes ------------------------------------------------------------------------------------


def runtime_problems(spec: v2.TrainingRuntimeSpec) -> list[Problem]:
    problems = _policy_problems(spec.ml_policy)
    jobs = spec.template.spec.replicated_jobs
    path = "spec.template.spec.replicatedJobs"
    if not jobs:
        return [*problems, Problem(path, "must list the trainer step (a replicated job)")]
    mpi = spec.ml_policy is not None and spec.ml_policy.mpi is not None
    for index, job in enumerate(jobs):
        problems += _replicated_job_problems(job, f"{path}[{index}]", mpi)
    if mpi:
        return problems + _mpi_steps_problems(jobs, path)
    trainers = [i for i, job in enumerate(jobs) if is_trainer_step(job)]
    if len(trainers) != 1:
        message = (
            f'exactly one replicated job must be the trainer step (named "{v2.NODE}" or labelled '
            f"{v2.ANCESTOR_LABEL}: {v2.TRAINER_STEP}); found {len(trainers)}"
        )
        problems.append(Problem(path, message))
    return problems


def _policy_problems(policy: v2.MLPolicy | None) -> list[Problem]:
    if policy is None:
        return []
    problems = _positive("spec.mlPolicy.numNodes", policy.num_nodes)
    sources = [
        n for n in ("torch", "mpi", "xgboost", "jax", "flux") if getattr(policy, n) is not None
    ]
    if len(sources) > 1:
        message = f"at most one ML policy may be set, got {', '.join(sources)}"
        problems.append(Problem("spec.mlPolicy", message))
    torch_nproc = policy.torch.num_proc_per_node if policy.torch else None
    if isinstance(torch_nproc, str) and torch_nproc != "auto":
        message = f'expected a number of processes or "auto", got {describe(torch_nproc)}'
        problems.append(Problem("spec.mlPolicy.torch.numProcPerNode", message))
    problems += _positive("spec.mlPolicy.torch.numProcPerNode", _int_or_none(torch_nproc))
    if policy.torch is not None and policy.torch.env_injection is not None:
        message = "is not supported by trainop: the contract goes to the node container only"
        problems.append(Problem("spec.mlPolicy.torch.envInjection", message))
    if policy.mpi is not None:
        problems += _mpi_policy_problems(policy.mpi)
    if "flux" in sources:
        message = "the flux ML policy is not supported by trainop yet"
        problems.append(Problem("spec.mlPolicy.flux", message))
    return problems


def _mpi_policy_problems(mpi: v2.MPIPolicy) -> list[Problem]:
    # mpiImplementation is Trainer v2.3's enum (OpenMPI, or "" for it) in the model itself.
    return _positive("spec.mlPolicy.mpi.numProcPerNode", mpi.num_proc_per_node)


def _mpi_steps_problems(jobs: list[v2.ReplicatedJob], path: str) -> list[Problem]:
    problems = []
    for step in (v2.LAUNCHER, v2.NODE):
        found = sum(1 for job in jobs if job.name == step)
        if found != 1:
            message = (
                f'an mpi runtime needs exactly one replicated job named "{step}"; found {found}'
            )
            problems.append(Problem(path, message))
    return problems


def _int_or_none(value: int | str | None) -> int | None:
    return value if isinstance(value, int) else None


def _replicated_job_problems(job: v2.ReplicatedJob, path: str, mpi: bool) -> list[Problem]:
    pod = (job.template.get("spec") or {}).get("template")
    problems = _positive(f"{path}.replicas", job.replicas)
    if not isinstance(pod, Mapping):
        return [*problems, Problem(f"{path}.template.spec.template", "required field is missing")]
    problems += check_template(pod, f"{path}.template.spec.template")
    problems += template_number_problems(job.template, f"{path}.template")
    problems += pod_problems(pod.get("spec") or {}, f"{path}.template.spec.template.spec")
    if job.name in (v2.LAUNCHER, v2.NODE) if mpi else is_trainer_step(job):
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if v2.NODE not in names:
            message = f'the {describe(job.name)} step needs a container named "{v2.NODE}"'
            problems.append(Problem(f"{path}.template.spec.template.spec.containers", message))
    else:
        message = (
            "an mpi runtime runs only its launcher and node steps"
            if mpi
            else "only the trainer step is supported by trainop (no initializer or launcher)"
        )
        problems.append(Problem(f"{path}.name", f"{describe(job.name)}: {message}"))
    return problems


def is_trainer_step(job: v2.ReplicatedJob) -> bool:
    """The trainer step: labelled as Trainer labels it, or (unlabelled runtimes) named "node"."""
    labels = (job.template.get("metadata") or {}).get("labels") or {}
    return labels.get(v2.ANCESTOR_LABEL) == v2.TRAINER_STEP or job.name == v2.NODE
