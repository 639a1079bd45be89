"""The Ray backend: every job gang-placed on a Ray cluster, supervised by a detached actor.

`create` checks the job, ships its directory to the cluster and starts the job's supervisor
(`supervisor.Supervisor`), a detached actor named after the job in the Ray namespace `trainop`,
pinned to the head node. Every other call asks that actor, so any driver connected to the
cluster sees the same jobs, status and logs, and a job outlives the driver that created it.

Connecting (`address`): None joins the cluster in `RAY_ADDRESS` or the one `ray start` last
started on this machine, else starts a local Ray for this process; "auto" joins an existing
cluster or fails; "ray://host:10001" is Ray Client; "host:6379" a cluster's GCS. An
already connected process (a Ray Tune trial, a Ray application) keeps its connection. With token
authentication (Ray 2.59+), the local token is used as Ray's own tools use it (`auth.py`).

The job's files (`files`): "upload" (default) ships the job's directory (the job file's, or
the `workdir=` given; a job given as data without one ships nothing) as Ray's runtime_env
`working_dir`, bounded and with excludes (`files.py`: a directory over the upload limit, or
with a symlink leading out of it, is refused before anything is packaged); each node unpacks
it once and each replica starts in its node's copy. "shared" ships nothing and starts replicas
in that same path (else the current directory), for clusters that share a filesystem (and for
a Ray on this machine).

Each job's supervisor reserves memory on the head node (`capacity.py`): a job the head cannot
hold any more is refused at submit, naming the limit.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import ActorAlreadyExistsError, GetTimeoutError, RayActorError, RayError

from trainop_core.api.job import GROUP, TrainingJob
from trainop_core.backends.base import JobEvent, LogLine, stamp_new
from trainop_core.backends.process.podspec import job_warnings, runnable_problems
from trainop_core.backends.ray import record
from trainop_core.backends.ray.auth import hint as auth_hint
from trainop_core.backends.ray.auth import use_local_token
from trainop_core.backends.ray.capacity import (
    check_head_room,
    release_head_slot,
    reserve_head_slot,
    supervisor_options,
)
from trainop_core.backends.ray.files import UploadLimits, ship, store, unshipped_commands, walk
from trainop_core.backends.ray.placement import Placement, extra_runtime_env, placement_for
from trainop_core.backends.ray.supervisor import remote_class
from trainop_core.decorators.config import DecoratorConfig, load_decorator_config
from trainop_core.errors import (
    AlreadyExistsError,
    InvalidJobError,
    JobTimeoutError,
    NotFoundError,
    TrainopError,
)
from trainop_core.kinds.base import Kind
from trainop_core.planner.types import ObservedPod

log = logging.getLogger("trainop")

RAY_NAMESPACE = "trainop"
NAME_PREFIX = "job:"
FILES_MODES = ("upload", "shared")
START_TIMEOUT_SECONDS = 300.0  # the supervisor's actor must start (its worker, its runtime env)
STOP_TIMEOUT_SECONDS = 300.0
FOLLOW_POLL_SECONDS = 0.1
WAIT_SLICE_SECONDS = 5.0
RUNS_ON = "the Ray cluster's nodes, with the job's files (runtime_env working_dir) and their Python"


def actor_name(name: str, namespace: str) -> str:
    return f"{NAME_PREFIX}{namespace}/{name}"


class RayBackend:
    """Jobs on a Ray cluster (see the module docstring for `address` and `files`).

    `working_dir` (upload mode): a package already on the cluster (a `gcs://` URI from
    `upload_directory`, or any URI Ray accepts) that every job starts in instead of its own
    directory; a Ray Tune search uploads the template's directory once, on the driver, that way.
    `upload_limits`: how much a shipped directory may hold (default: `UploadLimits.from_env()`).
    `init_options` go to `ray.init` when this backend connects (e.g. `num_cpus` for a local
    Ray, `runtime_env`). `decorators`: the decorator configuration (a file or a model; default
    `$TRAINOP_DECORATORS`, else the installed plugins), handed to each job's supervisor."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        files: str = "upload",
        working_dir: str | None = None,
        upload_limits: UploadLimits | None = None,
        init_options: Mapping[str, Any] | None = None,
        decorators: DecoratorConfig | str | Path | None = None,
    ) -> None:
        if files not in FILES_MODES:
            raise TrainopError(f"files={files!r}: expected one of {', '.join(FILES_MODES)}")
        self.files = files
        self.working_dir = working_dir
        self.upload_limits = upload_limits or UploadLimits.from_env()
        self.address = address
        self.decorators = load_decorator_config(decorators)
        connect(address, init_options or {})
        self._supervisor_class = remote_class()

    # --- JobStore -------------------------------------------------------------------------------
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        wire = job.to_dict()
        placement = self._check(job, kind, wire)
        if _exists(actor_name(job.name, job.namespace)):  # before shipping any file
            raise _already_exists(job, kind)
        check_head_room(len(_named_supervisors()))
        runtime_env = self._runtime_env(job, kind, wire, workdir)
        where = Path(workdir or os.getcwd()).resolve()
        stamp_new(wire)
        supervisor = self._start_supervisor(job, kind, wire, placement, where, runtime_env)
        return self._model(_call(supervisor.get.remote(), f"job {job.key}"))

    def get(self, name: str, namespace: str) -> TrainingJob:
        return self._model(_call(self._handle(name, namespace).get.remote(), f"{namespace}/{name}"))

    def list(self, namespace: str | None) -> list[TrainingJob]:
        handles = []
        for name in _named_supervisors():
            space, _, _ = name[len(NAME_PREFIX) :].partition("/")
            if namespace is None or space == namespace:
                with contextlib.suppress(ValueError):
                    handles.append(ray.get_actor(name, namespace=RAY_NAMESPACE))
        jobs = []
        refs: list[Any] = [handle.get.remote() for handle in handles]
        for ref in refs:
            with contextlib.suppress(RayError, TrainopError):  # deleted meanwhile: not listed
                jobs.append(self._model(ray.get(ref, timeout=60)))
        return sorted(jobs, key=lambda j: (j.namespace, j.name))

    def delete(self, name: str, namespace: str) -> None:
        handle = self._handle(name, namespace)
        with contextlib.suppress(RayError):
            ray.get(handle.delete.remote(), timeout=STOP_TIMEOUT_SECONDS)
        ray.kill(handle, no_restart=True)
        release_head_slot(f"{namespace}/{name}")
        record.remove(f"{namespace}/{name}")  # if its supervisor was not there to do it
        _until_gone(actor_name(name, namespace))

    # --- JobControl -----------------------------------------------------------------------------
    def stop(self, name: str, namespace: str, reason: str) -> None:
        handle = self._handle(name, namespace)
        _call(handle.stop.remote(reason), f"{namespace}/{name}", STOP_TIMEOUT_SECONDS)

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        handle = self._handle(name, namespace)
        _call(handle.set_suspended.remote(suspended), f"{namespace}/{name}")

    # --- Waiter ---------------------------------------------------------------------------------
    def wait(self, name: str, namespace: str, timeout: float | None = None) -> TrainingJob:
        handle = self._handle(name, namespace)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE_SECONDS if deadline is None else deadline - time.monotonic()
            piece = max(0.0, min(WAIT_SLICE_SECONDS, left))
            done = _call(handle.wait.remote(piece), f"{namespace}/{name}", piece + 60)
            if done is not None:
                return self._model(done)
            if deadline is not None and time.monotonic() >= deadline:
                job = self.get(name, namespace)
                raise JobTimeoutError(
                    f"job {namespace}/{name} did not finish within {timeout:g} s; "
                    f"it is still running ({_state(job)})"
                )

    # --- LogSource ------------------------------------------------------------------------------
    def logs(
        self,
        name: str,
        namespace: str,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        handle = self._handle(name, namespace)
        replicas = _call(handle.replicas.remote(), f"{namespace}/{name}")
        if replica is not None and replica not in replicas:
            known = ", ".join(replicas)
            raise NotFoundError(f"job {namespace}/{name} has no replica {replica!r} ({known})")
        chosen = [replica] if replica is not None else replicas
        what = f"{namespace}/{name}"
        if follow:
            return _follow(handle, chosen, what, tail=tail)
        return (line for r in chosen for line in _follow(handle, [r], what, once=True, tail=tail))

    # --- Inspectable ----------------------------------------------------------------------------
    def replicas(self, name: str, namespace: str) -> builtins.list[ObservedPod]:
        pods: list[ObservedPod] = _call(
            self._handle(name, namespace).observed_pods.remote(), f"{namespace}/{name}"
        )
        return pods

    def events(self, name: str, namespace: str) -> builtins.list[JobEvent]:
        """The job's events (time, type, reason, message), oldest first."""
        records = _call(self._handle(name, namespace).get_events.remote(), f"{namespace}/{name}")
        keys = ("time", "type", "reason", "message")
        return [JobEvent(*(str(record.get(key, "")) for key in keys)) for record in records]

    # --- internals ------------------------------------------------------------------------------
    def _check(self, job: TrainingJob, kind: Kind, wire: dict[str, Any]) -> Placement:
        specs = wire["spec"].get(kind.replica_field, {})
        idle = [rtype for rtype, _ in kind.idle_commands]
        problems = runnable_problems(
            specs, kind.replica_field, kind.default_container, "ray", idle_types=idle
        )
        placement, placement_problems = placement_for(job, kind)
        problems += placement_problems
        if problems or placement is None:
            raise InvalidJobError(problems, job=f"{job.kind}/{job.name}")
        for message in job_warnings(job, specs, kind, RUNS_ON):
            log.warning("%s %s: %s", job.kind, job.key, message)
        return placement

    def _runtime_env(
        self, job: TrainingJob, kind: Kind, wire: dict[str, Any], workdir: Path | None
    ) -> dict[str, Any]:
        """The runtime env of the job's actors: the annotation's fields, and in upload mode the
        job's directory shipped (`workdir`; None: the job came as data and names no directory,
        so nothing is shipped). A command that would run from a directory left out of the
        package is refused first."""
        env = extra_runtime_env(job)
        excludes = env.pop("excludes", None) or []
        if self.files != "upload":
            return env
        if self.working_dir is not None and "://" in self.working_dir:
            env["working_dir"] = self.working_dir
            return env
        if self.working_dir is None and workdir is None:
            log.info("%s %s names no directory (workdir=): no files shipped", job.kind, job.key)
            return env
        tree = walk(Path(self.working_dir or workdir or "."), self.upload_limits, excludes)
        specs = wire["spec"].get(kind.replica_field, {})
        problems = unshipped_commands(specs, kind.replica_field, tree)
        if problems:
            raise InvalidJobError(problems, job=f"{job.kind}/{job.name}")
        env["working_dir"] = store(tree)
        return env

    def _start_supervisor(
        self,
        job: TrainingJob,
        kind: Kind,
        wire: dict[str, Any],
        placement: Placement,
        workdir: Path,
        runtime_env: dict[str, Any],
    ) -> Any:
        shared = str(workdir) if self.files == "shared" else None
        # Its place on the head, reserved at once or refused at once (another driver's job may
        # have taken the last one since check_head_room).
        slot = reserve_head_slot(job.key, START_TIMEOUT_SECONDS, len(_named_supervisors()))
        try:
            handle = self._supervisor_class.options(
                name=actor_name(job.name, job.namespace),
                namespace=RAY_NAMESPACE,
                lifetime="detached",
                **supervisor_options(slot),  # in that place; never in a caller's group
                runtime_env=runtime_env or None,
            ).remote(wire, placement, shared, self.decorators.to_dict())
        except ActorAlreadyExistsError:  # created meanwhile by another driver
            release_head_slot(job.key)
            raise _already_exists(job, kind) from None
        try:
            ray.get(handle.ready.remote(), timeout=START_TIMEOUT_SECONDS)
        except (RayError, GetTimeoutError) as exc:
            ray.kill(handle, no_restart=True)  # nothing half-created
            release_head_slot(job.key)
            record.remove(job.key)
            _until_gone(actor_name(job.name, job.namespace))
            raise TrainopError(f"the supervisor of {job.key} could not start: {exc}") from exc
        return handle

    def _handle(self, name: str, namespace: str) -> Any:
        try:
            return ray.get_actor(actor_name(name, namespace), namespace=RAY_NAMESPACE)
        except ValueError:
            raise NotFoundError(f"job {namespace}/{name} not found") from None

    @staticmethod
    def _model(data: dict[str, Any]) -> TrainingJob:
        from trainop_core.api.load import default_registry

        job: TrainingJob = default_registry().get(data["kind"]).job_model.model_validate(data)
        return job


# --- connecting and shipping files ----------------------------------------------------------------
def connect(address: str | None, options: Mapping[str, Any]) -> None:
    """Join (or start) Ray unless this process is connected already."""
    if ray.is_initialized():
        return
    settings: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address is None or not address.startswith("ray://"):
        settings["include_dashboard"] = False
    settings.update(options)
    use_local_token(address)
    try:
        ray.init(address=address, **settings)
    except (ConnectionError, RuntimeError, ValueError, RayError) as exc:
        where = address or "(local)"
        raise TrainopError(f"cannot connect to Ray at {where}: {exc}{auth_hint(exc)}") from exc


def upload_directory(
    directory: Path, limits: UploadLimits | None = None, excludes: list[str] | None = None
) -> tuple[str, str]:
    """Ship `directory` to the connected cluster (bounded, see `files.py`); returns its
    `gcs://` URI, for a runtime_env's working_dir, and what was shipped ("3 files, 2.0 KiB")."""
    uri, tree = ship(directory, limits or UploadLimits.from_env(), excludes or [])
    log.debug("shipped %s (%s) as %s", tree.root, tree.describe(), uri)
    return uri, tree.describe()


# --- helpers --------------------------------------------------------------------------------------
def _call(ref: Any, what: str, timeout: float = 120.0) -> Any:
    """ray.get for a supervisor call: a supervisor that is gone means the job is gone."""
    try:
        return ray.get(ref, timeout=timeout)
    except RayActorError:
        raise NotFoundError(f"job {what} not found (its supervisor is gone)") from None
    except GetTimeoutError:
        raise TrainopError(f"job {what}: its supervisor did not answer in {timeout:g} s") from None


def _named_supervisors() -> list[str]:
    """The actor names of every trainop job's supervisor in the cluster."""
    return [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == RAY_NAMESPACE and entry["name"].startswith(NAME_PREFIX)
    ]


def _exists(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=RAY_NAMESPACE)
    except ValueError:
        return False
    return True


def _already_exists(job: TrainingJob, kind: Kind) -> AlreadyExistsError:
    return AlreadyExistsError(
        f'{kind.singular}.{GROUP} "{job.name}" already exists in namespace {job.namespace} '
        f"(delete it first: trainop delete {job.name} -n {job.namespace} --backend ray)"
    )


def _until_gone(name: str, timeout: float = 30.0) -> None:
    """Wait until Ray has freed the actor name (ray.kill is asynchronous)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _exists(name):
        time.sleep(0.05)


def _state(job: TrainingJob) -> str:
    from trainop_core.client import job_state

    return job_state(job)


def _follow(
    handle: Any, replicas: list[str], what: str, once: bool = False, tail: int | None = None
) -> Iterator[LogLine]:
    """Lines of `replicas` as they are written, until the job is over and everything was read
    (`once`: only what was written so far; `tail`: of what was written so far, only each
    replica's last `tail` lines, from the bounded output the supervisor keeps)."""
    offsets = dict.fromkeys(replicas, 0)
    partial = dict.fromkeys(replicas, b"")
    held = {r: deque[LogLine](maxlen=tail) for r in replicas} if tail is not None else None
    while True:
        answer = _call(handle.read_logs.remote(offsets), what)
        more = False
        for replica in replicas:
            data, offsets[replica], end = answer["chunks"].get(replica, (b"", 0, 0))
            more = more or offsets[replica] < end
            *lines, partial[replica] = (partial[replica] + data).split(b"\n")
            for line in lines:
                text = LogLine(replica, line.decode(errors="replace"))
                if held is None:
                    yield text
                else:
                    held[replica].append(text)
        if more:
            continue
        if held is not None:  # caught up with what was written before: its tail, then new lines
            for replica in replicas:
                yield from held[replica]
            held = None
        if once or answer["over"]:
            for replica in replicas:
                if partial[replica]:
                    yield LogLine(replica, partial[replica].decode(errors="replace"))
            return
        time.sleep(FOLLOW_POLL_SECONDS)
