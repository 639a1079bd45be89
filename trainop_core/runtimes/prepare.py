"""A TrainJob's admission: read it, find its runtime, translate, then the v1 path for the result.

Read -> validate (Trainer's rules) -> resolve the runtime -> translate -> default and validate
the planned job as any v1 job (`api.validation.prepare`). Everything after receives the planned
job; its problems, here and in any backend, name the TrainJob's or the runtime's fields
(`runtimes.origins`, the table the planned job carries), never the planned job's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.load import Document
from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.api.types import SERVER_SET
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.kinds.base import Kind
from trainop_core.runtimes.catalog import (
    DEFAULTS_DIR,
    RUNTIMES_ENV,
    RuntimeCatalog,
    load_catalog,
)
from trainop_core.runtimes.kind import PlannedTrainJob
from trainop_core.runtimes.origins import origins
from trainop_core.runtimes.policies.table import builtin_policies
from trainop_core.runtimes.translate import policy_name, steps_of, translate

RuntimeSource = RuntimeCatalog | str | Path | None


def catalog_for(runtimes: RuntimeSource) -> RuntimeCatalog:
    """A catalog from a directory (its runtimes first, then the defaults), else from
    $TRAINOP_RUNTIMES the same way, else the defaults alone."""
    if isinstance(runtimes, RuntimeCatalog):
        return runtimes
    chosen = runtimes if runtimes is not None else os.environ.get(RUNTIMES_ENV) or None
    directories = [Path(chosen)] if chosen is not None else []
    return load_catalog([*directories, DEFAULTS_DIR])


def prepare_trainjob(
    doc: Document, runtimes: RuntimeSource = None, namespace: str | None = None
) -> tuple[Kind, PlannedTrainJob]:
    """The planned, defaulted and validated job of one TrainJob document."""
    from trainop_core.api.validation import prepare

    job = check_trainjob(doc)
    catalog = catalog_for(runtimes)  # a bad runtime file's error names that file, not the job
    try:
        if namespace is not None:
            job.metadata.namespace = job.metadata.namespace or namespace
        runtime = catalog.find(job.spec.runtime_ref, job.namespace)
        problems = runtime_problems(job, runtime)
        table = origins(job, runtime, steps_of(runtime))
        try:
            kind, planned = prepare(translate(job, runtime))
        except InvalidJobError as err:  # the planned job's problems, named as written
            raise InvalidJobError([*problems, *table.error(err).problems]) from None
        if problems:
            raise InvalidJobError(problems)
    except InvalidJobError as err:
        raise _labelled(err, doc) from None
    assert isinstance(planned, PlannedTrainJob)  # reason: the TrainJob kind's model
    # Checked as kubeflow.org/v1 above; its pods and services are owned by the TrainJob itself.
    planned.api_version = v2.API_VERSION
    planned.trainjob = as_written(job)
    planned.origins = table
    return kind, planned


def as_written(job: v2.TrainJob) -> dict[str, Any]:
    """The TrainJob without status or server-set metadata (the CRDs' defaults in): what a
    store that is not a cluster keeps of it beside the planned job."""
    written = job.to_dict()
    written.pop("status", None)
    meta = written.get("metadata") or {}
    written["metadata"] = {k: v for k, v in meta.items() if k not in SERVER_SET}
    return written


def runtime_problems(job: v2.TrainJob, runtime: v2.TrainingRuntime) -> list[Problem]:
    """What Trainer refuses in a TrainJob given the runtime it names: env its ML policy sets
    (each policy's reserved variables, named `spec.trainer.env[i].name`)."""
    policy = builtin_policies()[policy_name(runtime)]
    env = job.spec.trainer.env if job.spec.trainer else None
    return policy.env_problems(env or [], "spec.trainer.env")


def check_trainjob(doc: Document) -> v2.TrainJob:
    """The TrainJob of `doc` checked by Trainer's rules alone (no runtime looked for yet)."""
    try:
        job = parse_v2(doc.data)
        if not isinstance(job, v2.TrainJob):
            message = f"expected a TrainJob to run, got {job.kind} (runtimes go in --runtimes)"
            raise InvalidJobError([Problem("kind", message)])
    except InvalidJobError as err:
        raise _labelled(err, doc) from None
    return job


def _labelled(err: InvalidJobError, doc: Document) -> InvalidJobError:
    label = err.job or f"TrainJob/{_name(doc.data)}"
    return type(err)(err.problems, source=doc.source, job=label)


def planned_manifest(job: PlannedTrainJob) -> dict[str, Any]:
    """The planned job as kubeflow.org/v1 wire data of the internal TrainJob kind: what an
    integration that edits v1 replica specs (Flyte's connector) works on, and what
    `TrainingClient.create` runs as it is (the runtime was resolved when it was planned)."""
    from trainop_core.api.job import API_VERSION

    data = job.to_dict()
    data.pop("status", None)
    data.pop("trainjob", None)  # what edits the planned job would leave behind
    data["apiVersion"] = API_VERSION
    return data


def v2_document(docs: Sequence[Document]) -> Document | None:
    """The document to run if `docs` is a single Trainer v2 object, else None (a v1 job)."""
    from trainop_core.api.trainjob_validation import is_v2

    if len(docs) == 1 and is_v2(docs[0].data):
        return docs[0]
    return None


def _name(data: Any) -> str:
    meta = data.get("metadata") if isinstance(data, dict) else None
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""
