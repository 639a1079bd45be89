"""The operator-like part of the local backend: one detached process per job.

    python -m trainop_core.backends.local.supervisor <job dir>

Each round it observes its replicas (`kubelet.LocalPod`), asks the pure planner what must happen,
and applies the plan: deletions, creations, status, events, then sleeps until a child exits, a
client pokes it (SIGUSR1), the plan's `requeue_after` expires or a safety poll comes round.
It decides nothing itself, except recording a job Failed when a user stops it.

Exactly one supervisor runs per job: it holds an fcntl lock on `supervisor.lock` for its lifetime.
Its parent is a tiny watcher (`watch`), a child subreaper that shares the lock: every process a
replica orphans (a double fork, a `setsid()` daemon) becomes the watcher's child, and when the
supervisor ends, however it ends (SIGKILL included), the watcher kills every one of them before it
releases the lock. The replicas themselves die with the supervisor (PR_SET_PDEATHSIG).

A new supervisor (started by a client, see `LocalBackend.recover`) reports the replicas that were
running as Failed with reason SupervisorLost and no exit code, like pods on a lost node, and the
planner decides what follows (recreate them under OnFailure/Always/ExitCode, fail the job under
Never). Finished replicas are remembered in `pods.json`, so a succeeded replica never runs twice
and no replica is duplicated; a damaged record is dropped (its processes are found by marker).
"""

from __future__ import annotations

import fcntl
import os
import random
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainop_core.backends.local.addressing import LocalAddressing, replica_id
from trainop_core.backends.local.leases import CREATE_GRACE_SECONDS, is_held
from trainop_core.backends.local.procs import (
    JOB_MARKER,
    kill_marked,
)
from trainop_core.backends.local.progress import FileProgress
from trainop_core.backends.local.queue import (
    RECHECK_SECONDS,
    admit,
    is_admitted,
    record_of,
    step_due,
)
from trainop_core.backends.local.queueing import Entry
from trainop_core.backends.local.state import (
    JobDir,
    StateRoot,
    read_json,
    remove_tree,
    write_json_atomic,
)
from trainop_core.backends.local.status import failed_status, is_finished
from trainop_core.backends.process.kubelet import LocalPod, stop_pods
from trainop_core.backends.process.podexec import (
    AGENT_NAME,
    remove_exec_spec,
    write_agent,
    write_configmaps,
    write_exec_spec,
)
from trainop_core.backends.process.podspec import base_env, launch_spec
from trainop_core.decorators.config import load_decorator_config
from trainop_core.decorators.decoration import Decorators
from trainop_core.errors import NotFoundError, TrainopError
from trainop_core.kinds.base import CONFIGMAP_DIR_OPTION, EXEC_AGENT_OPTION
from trainop_core.planner.types import Observed, Plan, PlanOptions
from trainop_core.private_files import open_lock
from trainop_core.progress import trainer_status_of
from trainop_core.replicas import primary_replica
from trainop_core.replicas import replica_id as short_name

SAFETY_POLL_SECONDS = 2.0  # SIGCHLD and SIGUSR1 wake us at once; this only bounds surprises
HELD_POLL_SECONDS = 0.05  # how often a TTL deletion held up by a follower looks again
# What it applied is itself news (on Kubernetes a pod deletion or a status write triggers the
# next reconcile): plan again at once, up to this many rounds in a row.
MAX_ROUNDS_AT_ONCE = 10
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FINISHED = ("Succeeded", "Failed")


class Supervisor:
    """Runs one job to completion (or until stopped). Single-threaded by design."""

    def __init__(self, job_dir: JobDir, planner: Callable[..., Plan] | None = None) -> None:
        from trainop_core.api.load import default_registry

        self.dir = job_dir
        local = job_dir.read_local()
        self.workdir: str = local["workdir"]
        self.queued = _queue_entry(job_dir, local)  # None: not queued (see `queue`)
        self._quota_released = False
        self.addressing = LocalAddressing(local["ports"])
        data = job_dir.read_job()
        self.kind = default_registry().get(data["kind"])
        # The configuration the job was created with (none recorded: the plugins only).
        self.decorators = Decorators.from_config(load_decorator_config(local.get("decorators", {})))
        self.env = base_env(os.environ)
        self.pods: dict[str, LocalPod] = {}
        # `kubectl exec` here (MPI's rsh agent), and the ConfigMaps a kind plans, as files.
        self.exec_specs = job_dir.path / "exec"
        agent = write_agent(job_dir.path / AGENT_NAME, self.exec_specs)
        self.configmaps = job_dir.path / "configmaps"
        self.options = PlanOptions(
            kind_options={EXEC_AGENT_OPTION: str(agent), CONFIGMAP_DIR_OPTION: str(self.configmaps)}
        )
        self.stop_signal = 0
        self._plan = planner or _default_planner()
        self._job: Any = None
        self._job_mtime = 0
        self._pods_written: list[dict[str, Any]] | None = None
        self._events_seen: set[tuple[str, str, str]] = set()
        self._delete_due: float | None = None  # when the TTL first asked for the deletion
        self._wake_r, self._wake_w = os.pipe()
        model = self._load_job()
        self.primary = short_name(*primary_replica(model, self.kind))
        self.progress = FileProgress(job_dir, self.primary, trainer_status_of(model))
        self._progress_wait: float | None = None  # seconds until a waiting write is due

    # --- the loop --------------------------------------------------------------------------------
    def run(self) -> int:
        previous = self._install_signals()
        try:
            self._recover()
            if not self._wait_for_admission():
                return self._stop()
            while not self._stop_requested():
                plan = self._reconcile_until_settled()
                self._release_quota_when_finished()
                if plan.delete_job and not self._deletion_held():
                    return self._delete_job()
                if not plan.delete_job and self._done(plan):
                    return 0
                self._sleep(HELD_POLL_SECONDS if plan.delete_job else self._timeout(plan))
            return self._stop()
        except Exception as exc:
            # A bug here would recur on every restart: record the job Failed instead of letting
            # clients restart the supervisor forever.
            self._record_failure(exc)
            raise
        finally:
            self.progress.close()
            stop_pods(self.pods.values())
            kill_marked(JOB_MARKER, str(self.dir.path))  # what the replicas left anywhere
            self._write_pods()
            self._restore_signals(previous)
            if self.queued is not None:  # stopped, deleted, failed: its quota may be free now
                self._admit_next()

    def _reconcile_until_settled(self) -> Plan:
        for _ in range(MAX_ROUNDS_AT_ONCE):
            plan, changed = self._reconcile()
            if plan.delete_job or not changed:
                break
        return plan

    def _reconcile(self) -> tuple[Plan, bool]:
        """One observe-plan-apply round; also whether it changed anything."""
        now = time.monotonic()
        for pod in self.pods.values():
            pod.poll(now)
        # Before the plan: who sees the job finished sees the progress its replica last printed.
        self._progress_wait = self._follow_progress()
        job = self._load_job()
        observed = Observed(pods=tuple(p.observed() for p in self.pods.values()))
        when, decorators = datetime.now(timezone.utc), self.decorators.in_process
        plan = self._plan(job, self.kind, observed, when, self.addressing, self.options, decorators)
        plan = self.decorators.servers.decorate(job, self.kind, plan).plan
        return plan, self._apply(plan)

    def _apply(self, plan: Plan) -> bool:
        doomed = [self.pods.pop(name) for name in plan.delete_pods if name in self.pods]
        stop_pods(doomed)
        for pod in [*doomed, *(p for p in self.pods.values() if p.phase in FINISHED)]:
            remove_exec_spec(self.exec_specs, pod.name)
        written = write_configmaps(self.configmaps, plan.apply_objects)
        created = [self._create(manifest) for manifest in plan.create_pods]
        self._write_pods()  # before the status: who sees the job finished sees its final pods
        written = self._write_job(plan) or written
        self._record([(e.type, e.reason, e.message) for e in plan.events])
        return bool(doomed) or any(created) or written

    def _create(self, manifest: dict[str, Any]) -> bool:
        name = manifest["metadata"]["name"]
        if name in self.pods:  # creating is idempotent: a pod that exists is not started twice
            return False
        spec = launch_spec(manifest, self.kind.default_container, self.env, self.workdir)
        rtype = self.kind.canonical_replica_type(spec.replica_type)
        log = self.dir.log_file(replica_id(rtype, spec.index))
        pod = LocalPod(spec, rtype, log, str(self.dir.path))
        self.pods[name] = pod
        write_exec_spec(self.exec_specs, name, spec.main, pod.markers())
        pod.start()
        return True

    def _done(self, plan: Plan) -> bool:
        """Finished, nothing left running and nothing scheduled (TTL): the supervisor may go."""
        alive = any(pod.alive or pod.next_wakeup() is not None for pod in self.pods.values())
        return is_finished(self._job_status()) and not alive and plan.requeue_after is None

    def _timeout(self, plan: Plan) -> float:
        now = time.monotonic()
        candidates = [SAFETY_POLL_SECONDS]
        if plan.requeue_after is not None:
            candidates.append(plan.requeue_after)
        if self._progress_wait is not None:
            candidates.append(self._progress_wait)
        candidates += [w - now for p in self.pods.values() if (w := p.next_wakeup()) is not None]
        return max(0.0, min(candidates))

    def _follow_progress(self) -> float | None:
        """Read the primary replica's new output; its progress is written when due, at once
        when the replica ended. Seconds until a waiting write is due (None: none waits)."""
        ended = any(
            pod.replica == self.primary and pod.phase in FINISHED for pod in self.pods.values()
        )
        try:
            return self.progress.step(final=ended)
        except (TrainopError, OSError):  # progress is never a reason to stop supervising
            traceback.print_exc()
            return None

    # --- the local queue -------------------------------------------------------------------------
    def _wait_for_admission(self) -> bool:
        """A queued job waits here, before any replica exists, until an admission step admits
        it: True then (or at once for a job that is not queued), False if it is stopped first.
        It runs the step itself when it starts, then whenever no step has completed for
        RECHECK_SECONDS (see `queue.step_due`), which is what finishes the work of a step that
        crashed; an admission by another process wakes it (SIGUSR1)."""
        if self.queued is None:
            return True
        root = StateRoot(self.dir.path.parents[2])
        step_now, next_check = True, 0.0
        while not self._stop_requested():
            if step_now:
                self._admit_next()
            if is_admitted(self.dir, self.queued.enqueued):
                self.dir.append_event("Normal", "Admitted", "admitted by the local queue")
                return True
            now = time.monotonic()
            if now >= next_check:
                next_check = now + RECHECK_SECONDS * (0.5 + random.random())
                step_now = step_due(root)
                continue
            step_now = False
            self._sleep(next_check - now)
        return False

    def _release_quota_when_finished(self) -> None:
        """Once the job has finished, its quota is free: run a step for whoever waits."""
        if self.queued is None or self._quota_released:
            return
        if is_finished(self._job_status()):
            self._quota_released = True
            self._admit_next()

    def _admit_next(self) -> None:
        """One admission step, without restarting anyone (see `queue.admit`)."""
        try:
            admit(StateRoot(self.dir.path.parents[2]))
        except Exception:  # the queue's trouble (a damaged queues.json) is not this job's
            traceback.print_exc()

    # --- state -----------------------------------------------------------------------------------
    def _load_job(self) -> Any:
        """The job model, re-read only when job.json changed (a client edited the spec)."""
        mtime = self.dir.job_file.stat().st_mtime_ns
        if self._job is None or mtime != self._job_mtime:
            self._job = self.kind.job_model.model_validate(self.dir.read_job())
            self._job_mtime = mtime
        return self._job

    def _job_status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.dir.read_job().get("status") or {}
        return status

    def _write_job(self, plan: Plan) -> bool:
        """Merge the plan's annotations, then its status, into job.json; True if that changed
        anything."""
        if not plan.job_annotations and plan.status is None:
            return False
        status = plan.status.to_dict() if plan.status is not None else None

        def change(data: dict[str, Any]) -> None:
            annotations = data["metadata"].setdefault("annotations", {})
            annotations.update(plan.job_annotations)
            if status is not None:
                data["status"] = status

        current = self.dir.read_job()
        before = (current["metadata"].get("annotations") or {}, current.get("status"))
        after = ({**before[0], **plan.job_annotations}, status or current.get("status"))
        if before == after:
            return False
        self.dir.modify_job(change)
        self._job = None  # re-read: the model then carries the new status
        return True

    def _record(self, events: list[tuple[str, str, str]]) -> None:
        """Append the round's events, except those the previous round already recorded: the
        planner repeats some every round (ExitedWithCode), which Kubernetes folds into one."""
        for event in events:
            if event not in self._events_seen:
                self.dir.append_event(*event)
        self._events_seen = set(events)

    def _write_pods(self) -> None:
        records = [pod.to_record() for pod in self.pods.values()]
        if records != self._pods_written and self.dir.path.is_dir():
            write_json_atomic(self.dir.pods_file, records)
            self._pods_written = records

    def _recover(self) -> None:
        """Take over from a supervisor that died: remember finished replicas, lose running ones.
        What the record cannot say (it is damaged) is re-derived: every process still carrying
        the job's marker is killed, and the planner re-creates the replicas it needs."""
        if not self.dir.pods_file.exists():
            return
        for record in self._pod_records():
            try:
                rid = replica_id(record["replicaType"], record["index"])
                pod = LocalPod.from_record(record, self.dir.log_file(rid), str(self.dir.path))
            except (ValueError, KeyError, TypeError, NotFoundError) as exc:
                self.dir.append_event("Warning", "PodRecordDamaged", f"pods.json: {exc}")
                continue
            if pod.phase not in ("Succeeded", "Failed"):
                pod.lose()
                self.dir.append_event("Warning", "SupervisorLost", f"{pod.name}: {pod.message}")
            self.pods[pod.name] = pod
        kill_marked(JOB_MARKER, str(self.dir.path))  # nothing of the old run may keep running

    def _pod_records(self) -> list[Any]:
        try:
            records = read_json(self.dir.pods_file)
        except (OSError, ValueError) as exc:
            records = None
            problem = f"pods.json cannot be read ({exc}); replicas that ran are treated as lost"
        else:
            problem = "pods.json does not hold a list of pods; replicas that ran are lost"
        if isinstance(records, list):
            return records
        self.dir.append_event("Warning", "PodRecordDamaged", problem)
        return []

    # --- stopping --------------------------------------------------------------------------------
    def _stop_requested(self) -> bool:
        """A stop signal, or a stop request written by a client that could not signal us (it
        does not know our pid: supervisor.pid may be damaged)."""
        if not self.stop_signal and self.dir.control_file.exists():
            self.stop_signal = signal.SIGTERM
        return bool(self.stop_signal)

    def _deletion_held(self) -> bool:
        """A TTL deletion waits while a follower has not yet seen the job finished, and briefly
        for a creator that has not started following it yet (see `leases`)."""
        now = time.monotonic()
        if self._delete_due is None:
            self._delete_due = now
        if is_held(self.dir.follow_lease):
            return True
        return now - self._delete_due < CREATE_GRACE_SECONDS and is_held(self.dir.create_lease)

    def _record_failure(self, exc: Exception) -> None:
        """Record the job Failed after our own failure, as far as its state allows."""
        try:
            self.dir.append_event("Warning", "SupervisorError", traceback.format_exc(limit=5))
            if self.dir.path.is_dir():
                self._record_stopped(f"the local supervisor failed: {exc!r}")
        except Exception:  # the state itself is what failed (damaged, disk full): say so
            traceback.print_exc()

    def _stop(self) -> int:
        """A client (delete, Ctrl-C on `trainop run`) or the system asked us to stop everything."""
        request = self._stop_request()
        stop_pods(self.pods.values())
        for pod in self.pods.values():
            if pod.phase in ("Pending", "Running"):
                pod.phase, pod.reason = "Failed", "Stopped"
        self._write_pods()
        if not request.get("delete"):
            self._record_stopped(str(request["reason"]))
        return 0

    def _stop_request(self) -> dict[str, Any]:
        try:
            request: dict[str, Any] = read_json(self.dir.control_file)
        except (OSError, ValueError):
            name = signal.Signals(self.stop_signal).name
            request = {"reason": f"stopped: the supervisor received {name}"}
        return request

    def _record_stopped(self, reason: str) -> None:
        status = self._job_status()
        if is_finished(status):
            return
        kind = self._load_job().kind
        failed = failed_status(status, kind, reason)
        self.dir.modify_job(lambda data: data.update(status=failed))
        self.dir.append_event("Warning", f"{kind}Failed", reason)

    def _delete_job(self) -> int:
        stop_pods(self.pods.values())
        self.pods.clear()
        remove_tree(self.dir.path)
        return 0

    # --- waking up -------------------------------------------------------------------------------
    def _install_signals(self) -> dict[int, Any]:
        """Wake on SIGCHLD/SIGUSR1, stop on STOP_SIGNALS; returns what to restore afterwards."""
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        previous: dict[int, Any] = {-1: signal.set_wakeup_fd(self._wake_w)}
        for sig in (signal.SIGCHLD, signal.SIGUSR1):
            previous[sig] = signal.signal(sig, lambda *_: None)
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, self._on_stop_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        signal.set_wakeup_fd(previous.pop(-1))
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        self.stop_signal = signum

    def _sleep(self, timeout: float) -> None:
        if self.stop_signal:
            return
        readable, _, _ = select.select([self._wake_r], [], [], timeout)
        if readable:
            while True:
                try:
                    if not os.read(self._wake_r, 512):
                        break
                except BlockingIOError:
                    break


def _queue_entry(job_dir: JobDir, local: dict[str, Any]) -> Entry | None:
    try:
        found = record_of(local)
    except ValueError as exc:
        raise job_dir.damaged(str(exc)) from None
    return None if found is None else found[1]


def _default_planner() -> Callable[..., Plan]:
    from trainop_core.planner import plan

    planner: Callable[..., Plan] = plan
    return planner


def _hold_lock(job_dir: JobDir) -> int | None:
    """Take the one-supervisor-per-job lock; None if another supervisor holds it."""
    fd = open_lock(job_dir.supervisor_lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def main(argv: list[str] | None = None) -> int:
    from trainop_core.backends.local.watcher import serve

    """`JOB_DIR [LOCK_FD]`: LOCK_FD is the already locked supervisor.lock a client passed down."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m trainop_core.backends.local.supervisor JOB_DIR", file=sys.stderr)
        return 2
    job_dir = JobDir(Path(args[0]))
    lock = int(args[1]) if len(args) == 2 else _hold_lock(job_dir)
    if lock is None:
        return 0  # another supervisor runs this job
    return serve(job_dir, lock)


if __name__ == "__main__":
    sys.exit(main())
