"""Generic edits and readings of a job's replicas; what a kind means is asked of the core.

Replica ids follow the core's log contract: `<lowercase replica type>-<index>` ("worker-1").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from flytekit.models.task import TaskTemplate

from trainop_core import replicas as core_replicas
from trainop_flyte.spec import Container, kind_of

REPLICA_TYPE_ENV = "TRAINOP_REPLICA_TYPE"
REPLICA_INDEX_ENV = "TRAINOP_REPLICA_INDEX"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # lowercase type, e.g. "worker"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
FAIL_ON_ERROR_ENV = "FLYTE_FAIL_ON_ERROR"  # pyflyte-execute exits 1 on a user error


def replica_specs(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's replica-spec map (`spec.<kind's replica field>`)."""
    field = kind_of(manifest["kind"]).replica_field
    specs: dict[str, Any] = manifest["spec"][field]
    return specs


def main_containers(manifest: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(replica type, the kind's default container) of every replica type."""
    name = kind_of(manifest["kind"]).default_container
    for rtype, spec in replica_specs(manifest).items():
        pod = spec.setdefault("template", {}).setdefault("spec", {})
        containers = pod.setdefault("containers", [])
        main = next((c for c in containers if c.get("name") == name), None)
        if main is None:
            main = {"name": name}
            containers.insert(0, main)
        yield rtype, main


def task_container(template: TaskTemplate) -> Container | None:
    """What a function task runs: its container, or its pod template's primary container.
    None for command tasks (their job says what to run)."""
    if template.container is not None:
        c = template.container
        return Container(c.image, list(c.command or []), list(c.args or []), dict(c.env or {}))
    if template.k8s_pod is None:
        return None
    name = (template.config or {}).get("primary_container_name", "primary")
    spec = template.k8s_pod.pod_spec or {}
    primary = next((c for c in spec.get("containers", []) if c.get("name") == name), None)
    if primary is None:
        return None
    env = {e["name"]: e["value"] for e in primary.get("env") or [] if "value" in e}
    return Container(primary.get("image", ""), primary.get("command") or [],
                     primary.get("args") or [], env)  # fmt: skip


def run_container(manifest: dict[str, Any], container: Container) -> None:
    """Make the replicas run the Flyte task's container (rendered `pyflyte-execute` args), each
    as the kind starts one program (`Kind.program`: every replica, or MPI's launcher under
    mpirun while its workers host the ranks; a TrainJob as its ML policy does)."""
    argv = [*container.command, *container.args]  # Flyte puts the whole argv in args
    from trainop_flyte.trainjob import is_trainjob, trainjob_program

    kind = kind_of(manifest["kind"])
    env = {**dict(container.env), FAIL_ON_ERROR_ENV: "true"}
    for rtype, main in main_containers(manifest):
        main.setdefault("image", container.image)
        if is_trainjob(manifest):  # its ML policy starts it (torchrun, the launcher's mpirun)
            program = trainjob_program(manifest, rtype, argv)
            hosting = program is None  # an mpi node keeps its planned command (it idles)
        else:
            program = kind.program(kind.canonical_replica_type(rtype), argv)
            hosting = False  # the kind's idle command applies (Kind.idle_commands)
        if not hosting:
            main.pop("command", None)
            main.pop("args", None)
        if program is not None:
            main["command"], main["args"] = program[:1], program[1:]
        merge_env(main, env)


def add_identity(manifest: dict[str, Any]) -> None:
    """Tell each replica who it is: its type as a value, its index from the pod's label."""
    for rtype, main in main_containers(manifest):
        label_ref = f"metadata.labels['{REPLICA_INDEX_LABEL}']"
        entries = [
            {"name": REPLICA_TYPE_ENV, "value": rtype},
            {"name": REPLICA_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": label_ref}}},
        ]
        names = {entry["name"] for entry in entries}
        main["env"] = [e for e in main.get("env", []) if e["name"] not in names] + entries


def add_env(manifest: dict[str, Any], env: Mapping[str, str]) -> None:
    """Add env entries to every replica's main container (its own entries win)."""
    for _, main in main_containers(manifest):
        merge_env(main, env)


def apply_pod_settings(
    manifest: dict[str, Any],
    *,
    service_account: str | None,
    env: Mapping[str, str],
    labels: Mapping[str, str],
) -> None:
    """Flyte's execution settings on every replica's pod template."""
    for rtype, main in main_containers(manifest):
        merge_env(main, env)
        template = replica_specs(manifest)[rtype]["template"]
        if service_account:
            template["spec"].setdefault("serviceAccountName", service_account)
        if labels:
            meta = template.setdefault("metadata", {})
            meta["labels"] = {**dict(labels), **meta.get("labels", {})}


def merge_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    """Add `env` entries the container does not set itself (its own entries win)."""
    current = container.get("env") or []
    present = {entry["name"] for entry in current}
    added = [{"name": k, "value": str(v)} for k, v in env.items() if k not in present]
    if added:
        container["env"] = [*added, *current]


def replica_ids(job: Any) -> list[str]:
    """Every replica of a core job model, in the kind's order (the core decides)."""
    return core_replicas.replica_ids(job, kind_of(job.kind))


def condition_message(job: Any, state: str) -> str:
    """The message of the job's condition for `state` (the latest one), else the state."""
    conditions = job.status.conditions if job.status is not None else []
    for condition in reversed(conditions):
        if _value(condition.type) == state and condition.message:
            return str(condition.message)
    return state or "Pending"


def failed(job: Any) -> list[str]:
    """Every replica of the replica types the job's status counts failures for."""
    statuses = job.status.replica_statuses if job.status is not None else {}
    counts = core_replicas.replica_counts(job, kind_of(job.kind))
    return [
        core_replicas.replica_id(rtype, index)
        for rtype, status in statuses.items()
        if status.failed
        for index in range(counts.get(rtype, 1))
    ]


def set_working_dir(manifest: dict[str, Any], workdir: str) -> None:
    """Start every replica in `workdir` unless its container names its own."""
    for _, main in main_containers(manifest):
        main.setdefault("workingDir", workdir)


def _value(item: Any) -> str:
    return str(getattr(item, "value", item))


def primary_replica_id(job: Any) -> str:
    """The replica whose result is the job's ("master-0"), as the core's client decides it."""
    from trainop_core.client import primary_replica

    return primary_replica(job, kind_of(job.kind))
