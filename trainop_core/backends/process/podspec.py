"""From a planned Pod manifest to the processes that stand in for it on this machine.

Pure functions: no process is started here. A replica runs its default container's `command` +
`args` (argv, no shell) after its init containers, with the container's `value` env entries and
Kubernetes' `$(VAR)` expansion. The image is never pulled; `valueFrom`/`envFrom` cannot be
resolved without a cluster and are skipped (create() warns once).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainop_core.errors import Problem
from trainop_core.runtimes.origins import own_text

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob
    from trainop_core.kinds.base import Kind

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
DEFAULT_GRACE_SECONDS = 5.0  # shorter than Kubernetes' 30 s: a local Ctrl-C should feel prompt
# A client gives a supervisor 60 s to stop (backend.STOP_TIMEOUT_SECONDS): a longer grace (an int64
# allows 292 billion years) would only end in a SIGKILL of the supervisor instead of the replicas.
MAX_GRACE_SECONDS = 30.0
LOCAL_RUNS_ON = "this machine, with this machine's files and Python"


@dataclass(frozen=True)
class Step:
    """One container run as one process."""

    container: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str


@dataclass(frozen=True)
class LaunchSpec:
    """How to run one pod: init containers in order, then the main container."""

    pod_name: str
    replica_type: str  # lowercase, as in the pod's label
    index: int
    restart_policy: str  # the pod's: Always | OnFailure | Never
    init: tuple[Step, ...]
    main: Step
    grace_seconds: float

    @property
    def replica(self) -> str:
        return f"{self.replica_type}-{self.index}"


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names are replaced, unknown ones kept verbatim,
    `$$` is an escaped `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("$(", i):
            end = text.find(")", i + 2)
            if end != -1:
                value = lookup(text[i + 2 : end])
                out.append(text[i : end + 1] if value is None else value)
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def downward_api(pod: Mapping[str, Any], host_ip: str = "127.0.0.1") -> dict[str, str]:
    """The downward-API fields (`valueFrom.fieldRef.fieldPath`) that mean something here;
    `host_ip` is the address the replica is reached at (pod and host IP alike)."""
    meta = pod.get("metadata") or {}
    fields = {
        "metadata.name": str(meta.get("name", "")),
        "metadata.namespace": str(meta.get("namespace", "default")),
        "status.podIP": host_ip,
        "status.hostIP": host_ip,
        "spec.nodeName": socket.gethostname(),
    }
    for key in ("labels", "annotations"):
        for name, value in (meta.get(key) or {}).items():
            fields[f"metadata.{key}['{name}']"] = str(value)
    return fields


def _field_ref(entry: Mapping[str, Any]) -> str | None:
    ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
    path = ref.get("fieldPath")
    return str(path) if path else None


def container_env(container: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """The container's env entries, each expanded against the entries before it; `valueFrom`
    resolves only for the downward-API `fields` (secrets and config maps need a cluster)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "valueFrom" in entry:
            path = _field_ref(entry) or ""
            if path in fields:
                env[entry["name"]] = fields[path]
            continue  # needs a cluster; create() has warned
        env[entry["name"]] = expand(str(entry.get("value", "")), env.get)
    return env


def base_env(inherited: Mapping[str, str]) -> dict[str, str]:
    """What every replica starts from: this environment, this interpreter first on PATH, and
    unbuffered Python output so that `logs -f` is live (the job's own env may override it)."""
    env = dict(inherited)
    bindir = str(Path(sys.executable).parent)
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir]
    env["PATH"] = os.pathsep.join([bindir, *rest])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _step(
    container: Mapping[str, Any],
    inherited: Mapping[str, str],
    workdir: str,
    fields: Mapping[str, str],
) -> Step:
    own = container_env(container, fields)
    words = [*container["command"], *(container.get("args") or [])]
    argv = [expand(str(word), own.get) for word in words]
    wanted = container.get("workingDir")
    cwd = wanted if wanted and os.path.isdir(wanted) else workdir
    return Step(container["name"], tuple(argv), {**inherited, **own}, cwd)


def default_container(containers: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """The container named like the kind's default one, else the first (as upstream picks)."""
    return next((c for c in containers if c.get("name") == name), containers[0])


def launch_spec(
    pod: Mapping[str, Any],
    default_name: str,
    inherited: Mapping[str, str],
    workdir: str,
    host_ip: str = "127.0.0.1",
) -> LaunchSpec:
    """The processes standing in for `pod` on the host reached at `host_ip`. Pure."""
    labels = pod["metadata"].get("labels", {})
    spec = pod["spec"]
    grace = spec.get("terminationGracePeriodSeconds")
    fields = downward_api(pod, host_ip)
    return LaunchSpec(
        pod_name=pod["metadata"]["name"],
        replica_type=labels[REPLICA_TYPE_LABEL],
        index=int(labels[REPLICA_INDEX_LABEL]),
        restart_policy=spec.get("restartPolicy") or "Always",
        init=tuple(_step(c, inherited, workdir, fields) for c in spec.get("initContainers") or []),
        main=_step(default_container(spec["containers"], default_name), inherited, workdir, fields),
        grace_seconds=DEFAULT_GRACE_SECONDS if grace is None else _grace(grace),
    )


def _grace(seconds: Any) -> float:
    return max(0.0, min(float(seconds), MAX_GRACE_SECONDS))


# --- create-time checks ---------------------------------------------------------------------------
def runnable_problems(
    replica_specs: Mapping[str, Mapping[str, Any]],
    field: str,
    default_name: str,
    backend: str = "local",
    idle_types: Sequence[str] = (),
) -> list[Problem]:
    """Every container a process backend would run must say what to run: it cannot run an
    image's entrypoint. `replica_specs` is the wire map (`spec.<field>`); the main container of
    `idle_types` gets the kind's idle command when it names none (`Kind.idle_commands`)."""
    problems: list[Problem] = []
    idle = {t.lower() for t in idle_types}
    for rtype, replica in replica_specs.items():
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        containers = pod_spec.get("containers") or []
        base = f"spec.{field}.{rtype}.template.spec"
        if containers and rtype.lower() not in idle:
            main = default_container(containers, default_name)
            where = f"{base}.containers[{containers.index(main)}]"
            problems += _command_problem(main, where, backend)
        for i, init in enumerate(pod_spec.get("initContainers") or []):
            problems += _command_problem(init, f"{base}.initContainers[{i}]", backend)
    return problems


def _command_problem(container: Mapping[str, Any], path: str, backend: str) -> list[Problem]:
    if container.get("command"):
        return []
    message = (
        f"required by the {backend} backend: it runs `command` + `args` as a process and cannot "
        f"run the image's entrypoint (image {container.get('image', '?')!r})"
    )
    return [Problem(f"{path}.command", message)]


def job_warnings(
    job: TrainingJob, replica_specs: Mapping[str, Mapping[str, Any]], kind: Kind, runs_on: str
) -> list[str]:
    """`local_warnings` of `job` (its wire replica specs), a planned TrainJob's naming the
    TrainJob's or its runtime's fields (`runtimes.origins`), never the planned paths."""
    found = local_warnings(replica_specs, kind.replica_field, kind.default_container, runs_on)
    return [own_text(job, message) for message in found]


def local_warnings(
    replica_specs: Mapping[str, Mapping[str, Any]],
    field: str,
    default_name: str,
    runs_on: str = LOCAL_RUNS_ON,
) -> list[str]:
    """What a process backend ignores in this job, one message per kind of thing ignored;
    `runs_on` says where replicas run instead of in their images."""
    images: set[str] = set()
    skipped: list[str] = []
    extra: list[str] = []
    for rtype, replica in replica_specs.items():
        pod_spec = (replica.get("template") or {}).get("spec") or {}
        containers = pod_spec.get("containers") or []
        base = f"spec.{field}.{rtype}.template.spec"
        for where, container in _every_container(pod_spec, base):
            images.add(str(container.get("image", "")))
            env = container.get("env") or []
            skipped += [
                f"{where}.env[{i}] ({e['name']})" for i, e in enumerate(env) if _unresolvable(e)
            ]
            skipped += [f"{where}.envFrom"] if container.get("envFrom") else []
        if containers:
            main = default_container(containers, default_name)
            extra += [
                f"{base}.containers[{i}] ({c.get('name')})"
                for i, c in enumerate(containers)
                if c is not main
            ]
    return _messages(sorted(i for i in images if i), skipped, extra, runs_on)


def _every_container(pod_spec: Mapping[str, Any], base: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, container) of the pod's containers, then its init containers."""
    return [
        (f"{base}.{field}[{i}]", container)
        for field in ("containers", "initContainers")
        for i, container in enumerate(pod_spec.get(field) or [])
    ]


def _unresolvable(entry: Mapping[str, Any]) -> bool:
    if "valueFrom" not in entry:
        return False
    path = _field_ref(entry) or ""
    local = (
        "metadata.name",
        "metadata.namespace",
        "status.podIP",
        "status.hostIP",
        "spec.nodeName",
    )
    return not (path in local or path.startswith(("metadata.labels[", "metadata.annotations[")))


def _messages(images: list[str], skipped: list[str], extra: list[str], runs_on: str) -> list[str]:
    messages = []
    if images:
        messages.append(f"image(s) {', '.join(images)} are not pulled: replicas run on {runs_on}")
    if skipped:
        names = ", ".join(skipped)
        messages.append(f"env from valueFrom/envFrom cannot be resolved locally, skipped: {names}")
    if extra:
        messages.append(f"only the default container runs locally; not run: {', '.join(extra)}")
    return messages
