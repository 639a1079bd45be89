"""Where each part of a planned TrainJob came from, so that its problems name what was written.

A TrainJob runs as a planned job (`translate`), and the rules every job keeps (the v1 rules of
`api.validation`, a backend's limits) are checked on that planned job, with the planned job's
paths (`spec.replicaSpecs.Node.replicas`) that no TrainJob's user ever wrote. `origins` builds,
from the same TrainJob and runtime and beside the translation, a table from planned paths to the
fields they were made from: the TrainJob's own (`spec.trainer.numNodes`) or its runtime's
(`spec.template.spec.replicatedJobs[0]...`, reported under `spec.runtimeRef.name` with the
runtime named). The longest matching planned path wins; a pod template's or a resource map's
deeper paths carry over; whatever no entry covers is reported against `spec`, so a planned path
never reaches a TrainJob's user. Pure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.podtemplate import join
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.runtimes.policies.base import NODE
from trainop_core.runtimes.translate import LIST_PATCHES, SET_PATCHES

RUNTIME_FIELD = "spec.runtimeRef.name"  # where a problem of the runtime a TrainJob names goes
_PLANNED = re.compile(r"\bspec\.(?:replicaSpecs|runPolicy|mlPolicy|numProcPerNode)[^\s,;:()]*")


@dataclass(frozen=True)
class Origin:
    own: str  # the TrainJob's field path, or the runtime's
    in_runtime: bool = False
    carry: bool = False  # deeper planned paths map to the same deeper own paths


@dataclass
class Origins:
    """Planned path -> where it came from; `runtime` names the runtime ("Kind/name")."""

    runtime: str
    table: dict[str, Origin] = field(default_factory=dict)

    def add(self, planned: str, own: str, *, in_runtime: bool = False, carry: bool = False) -> None:
        self.table[planned] = Origin(own, in_runtime, carry)

    def where(self, path: str) -> tuple[str, bool]:
        """(the own path of planned `path`, whether it is the runtime's)."""
        prefix = path
        while True:
            origin = self.table.get(prefix)
            if origin is not None:
                rest = path[len(prefix) :] if origin.carry else ""
                return origin.own + rest, origin.in_runtime
            if not prefix:  # not the job's (a setting's): as it was; else the spec as a whole
                return ("spec" if path else ""), False
            prefix = _parent(prefix)

    def problem(self, problem: Problem) -> Problem:
        own, in_runtime = self.where(problem.path)
        message = self.text(problem.message)
        if in_runtime:
            return Problem(RUNTIME_FIELD, f"{self.runtime} {own}: {message}")
        return Problem(own, message)

    def text(self, message: str) -> str:
        """`message` with every planned path in it named as written (a warning's, a problem's)."""
        return _PLANNED.sub(lambda m: self._shown(m.group(0)), message)

    def _shown(self, path: str) -> str:
        own, in_runtime = self.where(path)
        return f"{self.runtime} {own}" if in_runtime else own

    def error(self, err: InvalidJobError) -> InvalidJobError:
        """`err` with every problem named by the TrainJob's or the runtime's fields."""
        return type(err)([self.problem(p) for p in err.problems], source=err.source, job=err.job)


def _parent(path: str) -> str:
    """`a.b[2]` -> `a.b`, `a.b` -> `a`, `a` -> ``."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def own_text(job: object, message: str) -> str:
    """A backend's `message` about `job` (a warning) with the paths a planned TrainJob's user
    never wrote named by its own fields; any other job's message as it is."""
    table = getattr(job, "origins", None)
    return table.text(message) if isinstance(table, Origins) else message


@contextlib.contextmanager
def own_paths(job: object) -> Iterator[None]:
    """InvalidJobError raised inside, for a planned TrainJob, named by its own fields."""
    try:
        yield
    except InvalidJobError as err:
        table = getattr(job, "origins", None)
        if not isinstance(table, Origins):
            raise
        raise table.error(err) from None


# --- the table -----------------------------------------------------------------------------------


def origins(
    job: v2.TrainJob,
    runtime: v2.TrainingRuntime,
    steps: Mapping[str, tuple[v2.ReplicatedJob, tuple[str, ...]]],
) -> Origins:
    """The table for `job` run with `runtime`; `steps` as `translate` chose them (replica type
    -> the replicated job and the trainer fields it takes)."""
    table = Origins(f"{runtime.kind}/{runtime.name}")
    trainer = job.spec.trainer or v2.Trainer()
    ml = runtime.spec.ml_policy or v2.MLPolicy()
    nodes, nodes_in_runtime = (
        ("spec.mlPolicy.numNodes", True)
        if trainer.num_nodes is None and ml.num_nodes is not None
        else ("spec.trainer.numNodes", False)
    )
    for planned in ("metadata", "apiVersion", "kind"):
        table.add(planned, planned, carry=True)
    table.add("spec.replicaSpecs", nodes, in_runtime=nodes_in_runtime)
    table.add("spec.runPolicy.schedulingPolicy.minAvailable", nodes, in_runtime=nodes_in_runtime)
    _lifecycle(table, job)
    jobs = runtime.spec.template.spec.replicated_jobs
    for index, (rtype, (step, fields)) in enumerate(steps.items()):
        step_path = f"spec.template.spec.replicatedJobs[{jobs.index(step)}]"
        if index == 0:  # the trainer step's Job spec gives the job's
            backoff = f"{step_path}.template.spec.backoffLimit"
            table.add("spec.runPolicy.backoffLimit", backoff, in_runtime=True)
        base = f"spec.replicaSpecs.{rtype}"
        table.add(base, step_path, in_runtime=True)
        if rtype == NODE:
            table.add(f"{base}.replicas", nodes, in_runtime=nodes_in_runtime)
        pod = f"{step_path}.template.spec.template"
        table.add(f"{base}.template", pod, in_runtime=True, carry=True)
        table.add(f"{base}.restartPolicy", f"{pod}.spec.restartPolicy", in_runtime=True)
        template = (step.template.get("spec") or {}).get("template") or {}
        _node_container(table, (f"{base}.template.spec", f"{pod}.spec"), template, trainer, fields)
        _patches(table, f"{base}.template", template, job.spec.runtime_patches or [], step.name)
    return table


def _lifecycle(table: Origins, job: v2.TrainJob) -> None:
    for planned, own in (
        ("suspend", "spec.suspend"),
        ("activeDeadlineSeconds", "spec.activeDeadlineSeconds"),
        ("managedBy", "spec.managedBy"),
    ):
        table.add(f"spec.runPolicy.{planned}", own)
    gang = "spec.runPolicy.schedulingPolicy"
    table.add(gang, "spec.podGroupPolicy", in_runtime=True)
    timeout = "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds"
    table.add(f"{gang}.scheduleTimeoutSeconds", timeout, in_runtime=True)
    table.add("spec.mlPolicy", "spec.mlPolicy", in_runtime=True)
    table.add("spec.launcherIsNode", "spec.mlPolicy.mpi.runLauncherAsNode", in_runtime=True)
    trainer = job.spec.trainer
    if trainer is not None and trainer.num_proc_per_node is not None:
        table.add("spec.numProcPerNode", "spec.trainer.numProcPerNode")
    else:
        table.add("spec.numProcPerNode", "spec.mlPolicy", in_runtime=True)


_TRAINER_FIELDS = {
    "image": "image",
    "command": "command",
    "args": "args",
    "resources": "resourcesPerNode",
}


def _node_container(
    table: Origins,
    paths: tuple[str, str],
    template: Mapping[str, Any],
    trainer: v2.Trainer,
    fields: Sequence[str],
) -> None:
    """The node container's fields the trainer sets, or would set where the runtime has none
    (the TrainJob is where to give them), and its env entry by entry (`translate.merge_env`).
    `paths`: the planned pod spec's and the runtime's."""
    spec_path, runtime_spec = paths
    listed = (template.get("spec") or {}).get("containers") or []
    at = next((i for i, c in enumerate(listed) if c.get("name") == v2.NODE), None)
    if at is None:
        return
    container, path = listed[at], f"{spec_path}.containers[{at}]"
    for planned, own in _TRAINER_FIELDS.items():
        given = getattr(trainer, "resources_per_node" if own == "resourcesPerNode" else own)
        if planned in fields and (given is not None or not container.get(planned)):
            table.add(f"{path}.{planned}", f"spec.trainer.{own}", carry=True)
    written = trainer.env or []
    names = {e.get("name") for e in written}
    base = container.get("env") or []
    kept = [i for i, e in enumerate(base) if e.get("name") not in names]
    for position, original in enumerate(kept):
        own = f"{runtime_spec}.containers[{at}].env[{original}]"
        table.add(f"{path}.env[{position}]", own, in_runtime=True, carry=True)
    for index in range(len(written)):
        table.add(f"{path}.env[{len(kept) + index}]", f"spec.trainer.env[{index}]", carry=True)


def _patches(
    table: Origins,
    planned_pod: str,
    template: Mapping[str, Any],
    patches: Sequence[v2.RuntimePatch],
    step: str,
) -> None:
    """What each runtime patch set in this step's pods (a later patch's entry wins)."""
    lengths = {f: len((template.get("spec") or {}).get(f) or []) for f in LIST_PATCHES}
    for p_index, patch in enumerate(patches):
        spec_patch = (patch.training_runtime_spec or {}).get("template") or {}
        jobs = (spec_patch.get("spec") or {}).get("replicatedJobs") or []
        for j_index, job_patch in enumerate(jobs):
            if job_patch.get("name") != step:
                continue
            own = (
                f"spec.runtimePatches[{p_index}].trainingRuntimeSpec.template.spec"
                f".replicatedJobs[{j_index}].template"
            )
            pod_patch = ((job_patch.get("template") or {}).get("spec") or {}).get("template")
            _pod_patch(table, planned_pod, f"{own}.spec.template", pod_patch or {}, lengths)
            _meta_patch(table, planned_pod, f"{own}.metadata", job_patch.get("template") or {})


def _pod_patch(
    table: Origins, planned: str, own: str, pod: Mapping[str, Any], lengths: dict[str, int]
) -> None:
    _meta_patch(table, planned, f"{own}.metadata", pod)
    spec = pod.get("spec") or {}
    for name in spec.get("nodeSelector") or {}:
        key = join("nodeSelector", str(name))
        table.add(f"{planned}.spec.{key}", f"{own}.spec.{key}", carry=True)
    for name in SET_PATCHES:
        if name in spec:
            table.add(f"{planned}.spec.{name}", f"{own}.spec.{name}", carry=True)
    for name in LIST_PATCHES:
        for index in range(len(spec.get(name) or [])):
            where = f"{planned}.spec.{name}[{lengths[name] + index}]"
            table.add(where, f"{own}.spec.{name}[{index}]", carry=True)
        lengths[name] += len(spec.get(name) or [])


def _meta_patch(table: Origins, planned: str, own: str, template: Mapping[str, Any]) -> None:
    meta = template.get("metadata")
    for name in ("labels", "annotations"):
        for key in (meta.get(name) or {}) if isinstance(meta, Mapping) else {}:
            table.add(join(f"{planned}.metadata.{name}", key), join(f"{own}.{name}", key))
