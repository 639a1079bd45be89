"""The local queue's state and its admission step (the rules are `queueing`'s).

Files, all written atomically (a new file renamed over the old)::

    $TRAINOP_HOME/queues.json        quotas per queue and priority class values (`trainop queue`)
    $TRAINOP_HOME/queue.lock         held for a whole admission step and for config changes
    $TRAINOP_HOME/queue.stamp        rewritten at the end of every admission step
    jobs/<ns>/<name>/local.json      "queue": the job's queue, priority, requests and submission
                                     time, fixed at creation
    jobs/<ns>/<name>/queue.json      "Queued" with the reason, or "Admitted": written only by an
                                     admission step, under queue.lock; Admitted is final

**Who admits.** Nobody in particular: the admission step (`admit`) is one function that any
process may run, under `queue.lock`. It reads every queued job's files, decides (`queueing.decide`),
writes the decisions, then wakes the admitted jobs' supervisors (SIGUSR1). It runs when a queued
job is created, when one finishes or its supervisor ends (that supervisor runs it), when one is
deleted, and when a quota changes. A waiting supervisor also runs it when no step has completed
for `RECHECK_SECONDS` (`queue.stamp`'s time says when one last did).

**Crashes.** The lock dies with its holder and every write is atomic, so a step killed midway
leaves some decisions written and others not, and no new stamp: the next step (at the latest a
waiting supervisor's recheck) finishes the work, and an admission written but not signalled is
seen by the job's own supervisor at its next recheck. A job is started only by its own
supervisor (one per job, by `supervisor.lock`), and only once queue.json says Admitted, so
nothing starts twice. A killed supervisor's watcher restarts it and runs a step in its place
(see `watcher`); a job whose supervisor and watcher both died holds its place (or its quota)
until a client recovers it, as any local job (`trainop wait`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.api.types import format_time, utc_now
from trainop_core.backends.local.queueing import (
    Decision,
    Entry,
    Resources,
    decide,
    is_queue_name,
    priority_of,
    queue_of,
)
from trainop_core.backends.local.state import (
    JobDir,
    StateRoot,
    flocked,
    read_json,
    write_json_atomic,
    write_private,
)
from trainop_core.backends.local.status import is_finished
from trainop_core.errors import DamagedJobError, InvalidConfigError, NotFoundError, Problem

RECHECK_SECONDS = 3.0  # a waiting supervisor re-runs the step this often (crash recovery only)
ADMITTED = "Admitted"
QUEUED = "Queued"


@dataclass
class QueueConfig:
    """`queues.json`: quotas by queue name (a queue without one gets `machine_quota()`) and
    priority class values."""

    quotas: dict[str, Resources] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)

    def quota(self, queue: str) -> Resources:
        return self.quotas.get(queue) or machine_quota()

    def to_dict(self) -> dict[str, Any]:
        quotas = {name: quota.to_dict() for name, quota in sorted(self.quotas.items())}
        return {"queues": quotas, "priorityClasses": dict(sorted(self.priority_classes.items()))}


def machine_quota() -> Resources:
    """This machine's CPUs (those this process may run on) and physical memory."""
    from decimal import Decimal

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Resources(Decimal(cpus or 1), Decimal(memory))


def config_file(root: StateRoot) -> Path:
    return root.home / "queues.json"


def lock_file(root: StateRoot) -> Path:
    return root.home / "queue.lock"


def stamp_file(root: StateRoot) -> Path:
    return root.home / "queue.stamp"


def step_due(root: StateRoot) -> bool:
    """Whether no admission step has completed for RECHECK_SECONDS (or ever): a waiting
    supervisor's recheck then runs one. However many jobs wait, rechecks so add up to about one
    step per RECHECK_SECONDS, plus the steps that events cause."""
    try:
        age = time.time() - stamp_file(root).stat().st_mtime
    except FileNotFoundError:
        return True
    return not 0 <= age < RECHECK_SECONDS


def state_file(job_dir: JobDir) -> Path:
    return job_dir.path / "queue.json"


def load_config(root: StateRoot) -> QueueConfig:
    """The configuration; a missing file is the default, a damaged one an InvalidConfigError that
    names it and what is wrong."""
    path = config_file(root)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return QueueConfig()
    except (OSError, ValueError) as exc:
        raise _config_error(path, str(exc)) from None
    try:
        quotas = {
            str(name): Resources.from_dict(quota)
            for name, quota in (data.get("queues") or {}).items()
            if is_queue_name(name) and isinstance(quota, dict)
        }
        classes = data.get("priorityClasses") or {}
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in classes.values()):
            raise ValueError("priorityClasses: every value must be an integer")
    except (AttributeError, ValueError) as exc:
        raise _config_error(path, str(exc)) from None
    return QueueConfig(quotas, {str(k): v for k, v in classes.items()})


def change_config(root: StateRoot, change: Callable[[QueueConfig], None]) -> QueueConfig:
    """Read, change and write the configuration under the queue lock."""
    root.namespace_dir("default")  # TRAINOP_HOME made (private) if it is not there yet
    with flocked(lock_file(root)):
        config = load_config(root)
        change(config)
        write_json_atomic(config_file(root), config.to_dict())
    return config


def reset_config(root: StateRoot) -> Path | None:
    """Put `queues.json` aside (renamed `queues.json.bak`, for whoever wants to recover it), under
    the queue lock, so the defaults apply: the repair for a damaged file. None if there was none.
    Queued jobs keep the priority fixed at their creation."""
    path = config_file(root)
    if not root.home.is_dir():
        return None
    with flocked(lock_file(root)):
        try:
            os.replace(path, path.with_name(path.name + ".bak"))
        except FileNotFoundError:
            return None
    return path.with_name(path.name + ".bak")


def _config_error(path: Path, what: str) -> InvalidConfigError:
    problem = Problem("", f"cannot be read: {what[:200]} (fix it, or `trainop queue reset`)")
    return InvalidConfigError([problem], source=str(path))


# --- creation -------------------------------------------------------------------------------------
def queue_record(
    labels: dict[str, str] | None,
    priority_class: str | None,
    requests: Callable[[], Resources],
    root: StateRoot,
) -> dict[str, Any] | None:
    """What `local.json` keeps of a queued job (None: the job is not queued). Raises
    InvalidJobError naming the field for a bad queue name or an unknown priority class."""
    name = queue_of(labels)
    if name is None:
        return None
    priority = priority_of(labels, priority_class, load_config(root).priority_classes)
    return {
        "name": name,
        "priority": priority,
        "requests": requests().to_dict(),
        "enqueued": time.time_ns(),
    }


def record_of(local: dict[str, Any]) -> tuple[str, Entry] | None:
    """The queue and the queue entry (key left empty) of a job's `local.json`; None if the job
    is not queued. ValueError if the record is damaged."""
    record = local.get("queue")
    if record is None:
        return None
    if not isinstance(record, dict) or not is_queue_name(record.get("name")):
        raise ValueError("local.json: the queue record is damaged")
    priority, enqueued = record.get("priority"), record.get("enqueued")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (priority, enqueued)):
        raise ValueError("local.json: the queue record is damaged")
    requests = Resources.from_dict(record.get("requests") or {})
    assert isinstance(priority, int) and isinstance(enqueued, int)  # for mypy: checked above
    return record["name"], Entry("", requests, priority, enqueued)


def read_state(job_dir: JobDir) -> dict[str, Any]:
    """queue.json ({} if there is none yet, or it cannot be read: the next step rewrites it)."""
    try:
        data = read_json(state_file(job_dir))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_admitted(job_dir: JobDir, enqueued: int) -> bool:
    """Whether this job (this submission of its name: `enqueued`) has been admitted."""
    state = read_state(job_dir)
    return state.get("state") == ADMITTED and state.get("enqueued") == enqueued


# --- the admission step ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Seen:
    job_dir: JobDir
    queue: str
    entry: Entry
    stopping: bool  # a stop or delete was asked for: it neither waits nor may be restarted


def admit(root: StateRoot, spawn: Callable[[JobDir], object] | None = None) -> list[JobDir]:
    """Run one admission step (see the module docstring); returns the jobs it admitted.

    Afterwards the supervisor of each job it admitted is woken (SIGUSR1); `spawn`, if given,
    starts one for any admitted, unfinished job that has none (a supervisor killed before it started
    its replicas). Supervisors pass no `spawn`: a process started from one would be adopted by
    its watcher, which kills whatever it adopted when its own job ends.
    """
    if not root.jobs_root.is_dir():
        return []
    with flocked(lock_file(root)):
        config = load_config(root)
        seen = [s for s in map(_observe, root.all_jobs(None)) if s is not None]
        admitted = []
        for queue in sorted({s.queue for s in seen}):
            mine = [s for s in seen if s.queue == queue]
            decision = decide(queue, config.quota(queue), [s.entry for s in mine])
            admitted += _apply(queue, decision, mine)
        write_private(stamp_file(root), f"{os.getpid()}\n")  # the step completed (its time)
    for job_dir in admitted:
        signal_supervisor(job_dir)
    if spawn is not None:
        for lost in (s for s in seen if s.entry.admitted and not s.stopping):
            _restart(lost.job_dir, spawn)
    return admitted


def _observe(job_dir: JobDir) -> _Seen | None:
    """A queued, unfinished job as the step sees it; None for any other (or one that cannot be
    read: its supervisor, which reads the same files, records it Failed)."""
    try:
        found = record_of(read_json(job_dir.local_file))
        if found is None or is_finished(job_dir.read_job().get("status") or {}):
            return None
    except (OSError, ValueError, AttributeError, NotFoundError, DamagedJobError):
        return None
    queue, entry = found
    admitted = is_admitted(job_dir, entry.enqueued)
    stopping = job_dir.control_file.exists()
    if stopping and not admitted:
        return None  # being stopped or deleted before it ran: it takes no place in the queue
    entry = Entry(job_dir.key, entry.requests, entry.priority, entry.enqueued, admitted)
    return _Seen(job_dir, queue, entry, stopping)


def _apply(queue: str, decision: Decision, seen: list[_Seen]) -> list[JobDir]:
    by_key = {s.entry.key: s for s in seen}
    admitted = []
    for key in decision.admit:
        state = {"state": ADMITTED, "queue": queue, "admittedAt": format_time(utc_now())}
        if _write_state(by_key[key], state):
            admitted.append(by_key[key].job_dir)
    for key, message in decision.waiting.items():
        _write_state(by_key[key], {"state": QUEUED, "queue": queue, "message": message})
    return admitted


def _write_state(seen: _Seen, state: dict[str, Any]) -> bool:
    """Write queue.json unless it already says this; False if the job is gone meanwhile."""
    state["enqueued"] = seen.entry.enqueued
    current = read_state(seen.job_dir)
    if {k: v for k, v in current.items() if k != "admittedAt"} == {
        k: v for k, v in state.items() if k != "admittedAt"
    }:
        return False
    try:
        write_json_atomic(state_file(seen.job_dir), state)
    except FileNotFoundError:  # deleted while we decided: it needs nothing any more
        return False
    except OSError as exc:  # this job's directory only (another user's, read-only): not the queue's
        print(f"trainop queue: {seen.job_dir.key}: {exc}", file=sys.stderr)
        return False
    return True


def signal_supervisor(job_dir: JobDir) -> None:
    """Wake the job's supervisor (SIGUSR1) if it runs; it looks at its queue.json at once."""
    pid = job_dir.read_supervisor_pid()
    if pid is not None and job_dir.supervisor_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGUSR1)


def _restart(job_dir: JobDir, spawn: Callable[[JobDir], object]) -> None:
    """Start a supervisor for an admitted job whose supervisor ran and died (its pid file is
    there, its lock is free). A job without a pid file is still being created: its creator is
    about to start its supervisor."""
    if job_dir.supervisor_pid.exists() and not job_dir.supervisor_alive():
        with contextlib.suppress(OSError):  # gone meanwhile
            spawn(job_dir)


# --- what `trainop queue list` shows --------------------------------------------------------------
@dataclass(frozen=True)
class QueueSummary:
    name: str
    quota: Resources
    configured: bool  # False: the machine's default quota
    used: Resources  # by admitted, unfinished jobs
    admitted: int
    waiting: int


def summaries(root: StateRoot) -> list[QueueSummary]:
    """Every configured queue and every queue a job waits in or runs in, by name (read without
    the lock: a snapshot, as `trainop get` is)."""
    config = load_config(root)
    seen = [s for s in map(_observe, root.all_jobs(None)) if s is not None]
    found = []
    for name in sorted({*config.quotas, *(s.queue for s in seen)}):
        mine = [s.entry for s in seen if s.queue == name]
        admitted = [e for e in mine if e.admitted]
        used = sum((e.requests for e in admitted), Resources())
        summary = QueueSummary(
            name,
            config.quota(name),
            name in config.quotas,
            used,
            len(admitted),
            len(mine) - len(admitted),
        )
        found.append(summary)
    return found
