"""Katib export: the same search as a `kubeflow.org/v1beta1` Experiment driving the same job.

The trialTemplate wraps the job template unchanged (`${trialParameters.x}` intact; Katib sets
the trial's name and namespace itself), watches the container the kind runs its training process
in on the job's primary pod (selected by its replica-type and replica-index labels) with the
StdOut metrics collector (the `name=value` lines of trainop_core.report), and reads success and
failure from the job's conditions. The algorithm, trial counts and early stopping are the Ray Tune
search's (trainop_hpo.katib_search). Katib only drives kinds listed in its `trialResources`
(by default Job, TFJob, PyTorchJob, MPIJob and XGBoostJob: add `PaddleJob.v1.kubeflow.org` or
`JAXJob.v1.kubeflow.org` to katib-config for those; MXJob left it in v0.18). Field names follow
Katib's v1beta1 API; `feasibleSpace.distribution` (log-uniform ranges) needs Katib v0.18 or later
(older ones drop the field and sample uniformly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from trainop_core.api.podtemplate import default_container
from trainop_core.kinds.base import Kind
from trainop_core.planner.pods import REPLICA_INDEX, REPLICA_TYPE
from trainop_core.templating import placeholders
from trainop_hpo.katib_search import katib_search
from trainop_hpo.space import ParamSpec, SpaceError, spec_of
from trainop_hpo.template import TemplateSource, check_parameters, read_template, template_kind

API_VERSION = "kubeflow.org/v1beta1"
SUCCESS_CONDITION = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
OBJECTIVE_TYPES = {"min": "minimize", "max": "maximize"}


def katib_experiment(
    template: TemplateSource,
    param_space: Mapping[str, Any],
    metric: str,
    mode: str = "min",
    *,
    name: str | None = None,
    namespace: str | None = None,
    num_samples: int = 1,
    max_concurrent: int | None = None,
    scheduler: str | None = None,
    algorithm: str | None = None,
    max_failed: int | None = None,
    additional_metrics: Sequence[str] = (),
) -> dict[str, Any]:
    """The Katib Experiment (a dict) running the search `tune_job` would run with the same
    arguments: trial count, parallelism, failures allowed, algorithm and early stopping as
    `trainop_hpo.katib_search` maps them (`katib_notes` says where Katib behaves differently).

    `param_space` takes what `tune_job` takes (ParamSpecs, `KIND:ARGS` strings, Ray Tune
    domains, constants). `algorithm` picks Katib's for a sampled space (default random).
    Raises InvalidJobError if the parameters and the template's placeholders differ,
    ValueError (SpaceError, SearchError) for what Katib cannot express, naming it.
    """
    job = read_template(template)
    check_parameters(job, param_space)  # InvalidJobError: missing or unused
    if mode not in OBJECTIVE_TYPES:
        raise ValueError(f"mode {mode!r}: expected 'min' or 'max'")
    search = katib_search(
        param_space,
        num_samples=num_samples,
        max_concurrent=max_concurrent,
        scheduler=scheduler,
        algorithm=algorithm,
        max_failed=max_failed,
    )
    metadata: dict[str, Any] = {"name": name or _default_name(job)}
    if namespace:
        metadata["namespace"] = namespace
    spec: dict[str, Any] = {
        "objective": _objective(metric, mode, additional_metrics),
        "algorithm": {"algorithmName": search.algorithm},
    }
    if search.early_stopping is not None:
        spec["earlyStopping"] = search.early_stopping
    spec |= {
        "parallelTrialCount": search.parallel,
        "maxTrialCount": search.max_trials,
        "maxFailedTrialCount": search.max_failed,
        "metricsCollectorSpec": {"collector": {"kind": "StdOut"}},
        "parameters": [katib_parameter(key, value) for key, value in param_space.items()],
        "trialTemplate": trial_template(job),
    }
    return {"apiVersion": API_VERSION, "kind": "Experiment", "metadata": metadata, "spec": spec}


def katib_notes(param_space: Mapping[str, Any], **search: Any) -> list[str]:
    """Where the Experiment `katib_experiment(..., **search)` writes behaves differently from the
    Ray Tune search (the CLI prints them). Pure."""
    keys = ("num_samples", "max_concurrent", "scheduler", "algorithm", "max_failed")
    return katib_search(param_space, **{k: v for k, v in search.items() if k in keys}).notes


def katib_experiment_yaml(*args: Any, **kwargs: Any) -> str:
    """`katib_experiment(...)` as YAML text (fields in Katib's documented order)."""
    return dump_experiment(katib_experiment(*args, **kwargs))


def dump_experiment(experiment: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(experiment), sort_keys=False, default_flow_style=False, width=100)


def trial_template(job: Mapping[str, Any]) -> dict[str, Any]:
    """Katib's trialTemplate around a job template of any kind. Pure."""
    kind = template_kind(job)
    used = placeholders(job)
    return {
        "primaryContainerName": primary_container(job, kind),
        "primaryPodLabels": primary_pod_labels(job, kind),
        "successCondition": SUCCESS_CONDITION,
        "failureCondition": FAILURE_CONDITION,
        "trialParameters": [
            {"name": key, "description": _where(paths), "reference": key}
            for key, paths in used.items()
        ],
        "trialSpec": _trial_spec(job),
    }


def primary_pod_labels(job: Mapping[str, Any], kind: Kind) -> dict[str, str]:
    """The labels the operator puts on the job's primary pod only (`trainop_core.primary_replica`:
    the pod whose metrics are the trial's), e.g. MXJob's worker 0, not the Servers that carry
    upstream's `job-role: master`. Pure."""
    rtype, index = kind.primary_replica(_template_counts(job, kind))
    return {REPLICA_TYPE: rtype.lower(), REPLICA_INDEX: str(index)}


def primary_container(job: Mapping[str, Any], kind: Kind) -> str:
    """The primary pod's training container: the one named like the kind's default, else its
    first (MPIJob's launcher container may have any name, as upstream allows). Pure."""
    rtype, _ = kind.primary_replica(_template_counts(job, kind))
    specs = (job.get("spec") or {}).get(kind.replica_field) or {}
    spec = next((s for t, s in specs.items() if kind.canonical_replica_type(t) == rtype), None)
    template = spec.get("template") if isinstance(spec, Mapping) else None
    found = default_container(template, kind.default_container) if template else None
    name = (found or {}).get("name")
    return name if isinstance(name, str) and name else kind.default_container


def _template_counts(job: Mapping[str, Any], kind: Kind) -> dict[str, int]:
    specs = (job.get("spec") or {}).get(kind.replica_field) or {}
    counts: dict[str, int] = {}
    for rtype, spec in specs.items():
        replicas = spec.get("replicas", 1) if isinstance(spec, Mapping) else 1
        # A placeholder count is filled per trial: such a replica type is there all the same.
        counts[kind.canonical_replica_type(rtype)] = replicas if isinstance(replicas, int) else 1
    return {t: counts[t] for t in (*kind.replica_types, *counts) if t in counts}


def _where(paths: list[str]) -> str:
    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
    return f"used in {paths[0]}{more}"


def _trial_spec(job: Mapping[str, Any]) -> dict[str, Any]:
    # Katib names and places each trial's job itself; everything else goes through as written.
    trial = dict(job)
    metadata = {
        k: v for k, v in (job.get("metadata") or {}).items() if k not in ("name", "namespace")
    }
    if metadata:
        trial["metadata"] = metadata
    else:
        trial.pop("metadata", None)
    return trial


def _objective(metric: str, mode: str, additional: Sequence[str]) -> dict[str, Any]:
    objective: dict[str, Any] = {"type": OBJECTIVE_TYPES[mode], "objectiveMetricName": metric}
    if additional:
        objective["additionalMetricNames"] = list(additional)
    return objective


def _default_name(job: Mapping[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("name") or "trial") + "-tune"


# --- parameters ---------------------------------------------------------------------------------
def katib_parameter(name: str, value: Any) -> dict[str, Any]:
    """One entry of Katib's `parameters` for a search-space value; ValueError names `name`."""
    spec = spec_of(name, value)
    if spec is not None:
        return _from_spec(spec)
    if isinstance(value, Mapping) and "grid_search" in value:
        return _listed(name, list(value["grid_search"]))
    if type(value).__module__.startswith("ray."):
        return _from_ray_domain(name, value)
    if isinstance(value, bool | int | float | str):
        return _listed(name, [value])  # a constant: a one-value list
    raise SpaceError(f"parameter {name!r}: cannot express {value!r} as a Katib parameter")


def _from_spec(spec: ParamSpec) -> dict[str, Any]:
    if spec.kind in ("choice", "grid"):
        return _listed(spec.name, list(spec.values))
    if spec.kind == "randint":  # HI is excluded, Katib's max is included
        return _ranged(spec.name, "int", int(spec.low), int(spec.high) - 1)
    log = spec.kind == "loguniform"
    return _ranged(spec.name, "double", spec.low, spec.high, log=log)


def _from_ray_domain(name: str, domain: Any) -> dict[str, Any]:
    sampler = getattr(domain, "sampler", None)
    step = getattr(sampler, "q", None)
    base = type(getattr(sampler, "sampler", sampler)).__name__
    if base not in ("_Uniform", "_LogUniform"):
        raise SpaceError(f"parameter {name!r}: Katib has no {base.strip('_')} distribution here")
    kind = type(domain).__name__
    if kind == "Categorical":
        return _listed(name, list(domain.categories))
    log = base == "_LogUniform"
    if kind == "Float":
        return _ranged(name, "double", domain.lower, domain.upper, log=log, step=step)
    if kind == "Integer":  # Ray's upper bound is excluded unless quantized
        upper = domain.upper if step is not None else domain.upper - 1
        return _ranged(name, "int", domain.lower, upper, log=log, step=step)
    raise SpaceError(f"parameter {name!r}: cannot express a Ray {kind} as a Katib parameter")


def _ranged(
    name: str, ptype: str, low: float, high: float, *, log: bool = False, step: Any = None
) -> dict[str, Any]:
    space = {"min": _text(low), "max": _text(high)}
    if step is not None:
        space["step"] = _text(step)
    if log:
        space["distribution"] = "logUniform"
    return {"name": name, "parameterType": ptype, "feasibleSpace": space}


def _listed(name: str, values: list[Any]) -> dict[str, Any]:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    ptype = "discrete" if numeric else "categorical"
    return {
        "name": name,
        "parameterType": ptype,
        "feasibleSpace": {"list": [_substitutable(name, _text(v)) for v in values]},
    }


def _substitutable(name: str, text: str) -> str:
    """Katib pastes a trial's values into the trial's JSON text unescaped (a string replace of
    `${trialParameters.x}`): a quote or backslash there would change the job's structure, not
    just the value, and another placeholder would be filled in turn."""
    if '"' in text or "\\" in text or "${" in text or any(ord(c) < 32 for c in text):
        raise SpaceError(
            f"parameter {name!r}: Katib cannot substitute {text[:40]!r} safely (it pastes values "
            'into the trial\'s JSON unescaped): remove quotes ("), backslashes, "${" and control '
            "characters"
        )
    return text


def _text(value: Any) -> str:
    # Katib's feasibleSpace holds strings.
    return repr(value) if isinstance(value, float) else str(value)
