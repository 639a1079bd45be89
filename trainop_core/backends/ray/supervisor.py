"""The operator-like part of the Ray backend: one detached actor per job, holding its state.

Each round it observes its replicas (the reports their actors send through `watch`), asks the
pure planner what must happen, and applies the plan to its `Gang`: stop and start pods, write
status and events. It decides nothing itself, except three things no planner input expresses:
a job stopped by its user is recorded Failed, a job that cannot be placed within its schedule
timeout is recorded Failed, and a replica whose actor was lost (its node died, or the actor did)
takes its gang with it when the planner re-creates it: its address changes, every other replica's
env points at the old one, and no framework here re-admits one rank into a running group. The
others are stopped and re-created with the new addresses; only the lost replica counts as a
restart against backoffLimit.

The actor is detached (it outlives the driver that created the job) and named after the job, so
any driver connected to the cluster finds it. It is threaded: one thread runs the rounds, the
others answer clients (get, logs, wait, stop, suspend, delete) from the state it holds. If its
process dies, Ray restarts it (`record.MAX_RESTARTS` times): the new process takes the job as it
was from its record (`record.py`) and starts its replicas again, which died with the old one.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayError

from trainop_core.backends.ray import record
from trainop_core.backends.ray.addressing import RayAddressing, UnplacedAddressing
from trainop_core.backends.ray.capacity import release_head_slot
from trainop_core.backends.ray.gang import Gang, PlacementInterrupted, PlacementTimeout, Slot
from trainop_core.backends.ray.journal import Journal
from trainop_core.backends.ray.placement import Placement, unschedulable_message
from trainop_core.backends.ray.rsh import AGENT_NAME, node_dir
from trainop_core.kinds.base import CONFIGMAP_DIR_OPTION, EXEC_AGENT_OPTION
from trainop_core.planner.conditions import failed_status, is_finished_wire
from trainop_core.planner.types import Observed, ObservedPod, Plan, PlanOptions
from trainop_core.progress import (
    JobProgress,
    TrainerStatus,
    WriteGate,
    annotate,
    dropped_message,
    trainer_status_of,
)
from trainop_core.replicas import primary_replica, replica_id

ADDRESSES_ANNOTATION = "ray.trainop.dev/addresses"  # replica=ip:port,... once placed
MAX_ROUNDS_AT_ONCE = 10
IDLE_SECONDS = 2.0  # a safety poll; replica reports and client requests wake the loop sooner
WATCH_SECONDS = 5.0
SLICE_SECONDS = 0.1
FINISHED = ("Succeeded", "Failed")


class Supervisor:
    """The actor class (made remote by `remote_class`). `job` is the wire form, defaulted and
    validated by the driver; `workdir` is where replicas start on a shared filesystem (None: the
    job's files unpacked from its runtime env's working_dir); `decorators` the driver's decorator
    configuration (wire form)."""

    def __init__(
        self,
        job: dict[str, Any],
        placement: Placement,
        workdir: str | None,
        decorators: dict[str, Any] | None = None,
    ) -> None:
        from trainop_core.api.load import default_registry
        from trainop_core.decorators.config import load_decorator_config
        from trainop_core.decorators.decoration import Decorators
        from trainop_core.planner import plan

        self.decorators = Decorators.from_config(load_decorator_config(decorators or {}))
        self.kind = default_registry().get(job["kind"])
        self.wire = job
        self.key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        self.workdir = workdir
        self.lock = threading.Condition()
        self._events_seen: set[tuple[str, str, str]] = set()
        self.journal = Journal(placement.replicas, self.lock)
        types = {
            r: self.kind.canonical_replica_type(r.rsplit("-", 1)[0]) for r in placement.replicas
        }
        self.gang = Gang(self.key, placement, types)
        self.placement = placement
        self.requests: dict[str, Any] = {}
        self.poked = False  # the spec changed (suspend/resume): plan again at once
        self.settled = False  # finished and nothing of it runs or is held any more
        self.gone = False  # deleted: every resource released
        self._plan: Callable[..., Plan] = plan
        # A process backend's exec agent and ConfigMap directory, on every node (see rsh.py).
        where = node_dir(str(job["metadata"].get("uid", "")))
        self.options = PlanOptions(
            kind_options={
                EXEC_AGENT_OPTION: str(where / AGENT_NAME),
                CONFIGMAP_DIR_OPTION: str(where / "configmaps"),
            }
        )
        self._model: Any = None
        self._restore()
        # The primary replica's output, as the supervisor receives it, makes the job's progress.
        model = self._job()
        self.primary = replica_id(*primary_replica(model, self.kind))
        self.progress = JobProgress(
            self._write_progress,
            WriteGate(written=trainer_status_of(model)),
            on_dropped=self._progress_dropped,
        )
        self._progress_wait: float | None = None
        threading.Thread(target=self._loop, daemon=True, name="supervisor").start()

    def _restore(self) -> None:
        """Take the job as it was if this is a restarted process (see the module docstring)."""
        kept = record.load(self.key, str(self.wire["metadata"].get("uid", "")))
        if kept is not None:
            self.wire = kept
            self.gang.remove_leftovers()
            message = "the job's Ray supervisor was restarted (its process died); its replicas "
            message += "went with it and start again; output written before was lost"
            self.journal.event("Warning", "SupervisorRestarted", message)
        record.save(self.key, self.wire)

    # --- clients ---------------------------------------------------------------------------------
    def ready(self) -> bool:
        return True

    def get(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.wire)

    def get_events(self) -> list[dict[str, Any]]:
        return self.journal.snapshot()

    def observed_pods(self) -> list[ObservedPod]:
        """The replicas' pods as last seen, in the kind's replica order (slots are kept so)."""
        with self.lock:
            return [slot.pod for slot in self.gang.slots.values() if slot.pod is not None]

    def wait(self, timeout: float) -> dict[str, Any] | None:
        """The job once it has finished (within `timeout` s), else None."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not self._finished():
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.lock.wait(left)
            return copy.deepcopy(self.wire)

    def read_logs(self, offsets: dict[str, int]) -> dict[str, Any]:
        """Output of each replica in `offsets` from its offset on, as (bytes, next offset, end of
        what is kept), and whether more can come (no: the job finished and none of its replicas
        runs any more)."""
        chunks = self.journal.read(offsets)
        with self.lock:
            return {"chunks": chunks, "over": self.settled or self.gone}

    def replicas(self) -> list[str]:
        return list(self.placement.replicas)

    def replica_actor(self, pod: str) -> Any:
        """The actor running pod `pod` (an exec agent's question), None if none runs it."""
        with self.lock:
            slots = [s for s in self.gang.slots.values() if s.pod is not None]
        return next((s.actor for s in slots if s.pod is not None and s.pod.name == pod), None)

    def stop(self, reason: str) -> None:
        """Stop every replica of an unfinished job and record it Failed with `reason` (a finished
        job is left as it is)."""
        with self.lock:
            if self._finished():
                return
        self._request("stop", reason, lambda: self._finished() and not self._running())

    def set_suspended(self, suspended: bool) -> None:
        with self.lock:
            self.wire["spec"].setdefault("runPolicy", {})["suspend"] = suspended
            self._model = None
            record.save(self.key, self.wire)
            self.poked = True
            self.lock.notify_all()

    def delete(self) -> None:
        """Stop everything and release every Ray resource of the job; the caller then kills
        this actor."""
        self._request("delete", True, lambda: self.gone)

    def _request(self, name: str, value: Any, done: Callable[[], bool]) -> None:
        with self.lock:
            self.requests[name] = value
            self.lock.notify_all()
            while not done():
                self.lock.wait(1.0)

    # --- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self.gone:
                plan = self._rounds()
                if self.gone:
                    break
                if plan.delete_job:
                    self._teardown(exit_actor=True)
                    return
                self._sleep(self._timeout(plan))
        except Exception as exc:  # a bug would otherwise leave the job running unsupervised
            self.journal.event("Warning", "SupervisorError", traceback.format_exc(limit=5))
            with contextlib.suppress(Exception):
                self.gang.release()
            self._record_failed(f"the Ray supervisor failed: {exc!r}")
            self._await_deletion()

    def _await_deletion(self) -> None:
        """After the loop failed (nothing runs or is held any more): a delete is done at once."""
        with self.lock:
            self.settled = True
            self.lock.notify_all()
            while "delete" not in self.requests:
                self.lock.wait(1.0)
            record.remove(self.key)
            self.gone = True
            self.lock.notify_all()

    def _rounds(self) -> Plan:
        with self.lock:
            self.poked = False
        for _ in range(MAX_ROUNDS_AT_ONCE):
            if self._handle_requests():
                return Plan()
            self._collect(0)
            self._follow_progress()  # before the plan: a finished job shows its last progress
            plan, changed = self._round()
            if plan.delete_job or not changed:
                break
        return plan

    def _round(self) -> tuple[Plan, bool]:
        """Observe, plan, apply (placing the job first if the plan wants pods it cannot start)."""
        plan = self._plan_once()
        changed = self._apply(plan)
        if plan.create_pods and not self.gang.placed:
            changed = self._place() or changed
        self._release_if_idle()
        return plan, changed

    def _plan_once(self) -> Plan:
        pods = tuple(s.pod for s in self.gang.slots.values() if s.pod is not None)
        placed = self.gang.placed
        addressing = RayAddressing(self.gang.endpoints()) if placed else UnplacedAddressing()
        job, observed, now = self._job(), Observed(pods=pods), datetime.now(timezone.utc)
        decorators = self.decorators.in_process
        plan = self._plan(job, self.kind, observed, now, addressing, self.options, decorators)
        return self.decorators.servers.decorate(job, self.kind, plan).plan

    # --- applying a plan -------------------------------------------------------------------------
    def _apply(self, plan: Plan) -> bool:
        doomed = [s for s in self.gang.slots.values() if s.pod and s.pod.name in plan.delete_pods]
        lost = [s for s in doomed if s.actor is None]
        self.gang.stop_pods(doomed)
        if lost:
            self._restart_gang_with(lost, plan)
        configmaps = [o for o in plan.apply_objects if o["kind"] == "ConfigMap"]
        created = self._start_pods(plan.create_pods, configmaps) if self.gang.placed else 0
        written = self._write(plan)
        return bool(doomed) or created > 0 or written

    def _restart_gang_with(self, lost: list[Slot], plan: Plan) -> None:
        """A lost replica is being re-created somewhere else: its peers go with it."""
        if self._finished_after(plan):
            return
        names = ", ".join(s.replica for s in lost)
        peers = [
            s
            for s in self.gang.slots.values()
            if s.pod is not None and s.pod.phase in ("Pending", "Running")
        ]
        self.gang.stop_pods(peers)
        for slot in peers:
            self.journal.mark(slot.replica, f"gang restart: {names} lost its actor")
        message = f"replica(s) {names} lost; restarting every replica of the gang with it"
        self.journal.event("Warning", "GangRestart", message)

    def _start_pods(self, manifests: list[dict[str, Any]], configmaps: list[dict[str, Any]]) -> int:
        """Hand each planned pod (and the kind's ConfigMaps, written on its node) to its
        replica's actor (all at once, then wait for them)."""
        calls = []
        for manifest in manifests:
            slot = self._slot_of(manifest)
            if slot is None or slot.pod is not None or slot.actor is None:
                continue
            ref = slot.actor.start.remote(
                manifest, self.kind.default_container, self.workdir, configmaps
            )
            labels = manifest["metadata"]["labels"]
            index = int(labels["training.kubeflow.org/replica-index"])
            name = manifest["metadata"]["name"]
            slot.pod = ObservedPod(name, slot.replica_type, index, "Pending")
            slot.running = True
            calls.append((slot, ref))
        for slot, ref in calls:
            try:
                slot.since = ray.get(ref, timeout=120)
            except RayActorError as exc:
                self._lose(slot, exc)
            except Exception as exc:  # the pod could not be made into processes
                assert slot.pod is not None
                message = f"could not start: {exc}"
                slot.pod = ObservedPod(
                    slot.pod.name, slot.replica_type, slot.pod.index, "Failed", 127,
                    reason="StartError", message=message,
                )  # fmt: skip
                slot.running = False
                self.journal.mark(slot.replica, message)
        return len(calls)

    def _slot_of(self, manifest: dict[str, Any]) -> Slot | None:
        labels = manifest["metadata"]["labels"]
        rtype = labels["training.kubeflow.org/replica-type"]
        return self.gang.slots.get(f"{rtype}-{labels['training.kubeflow.org/replica-index']}")

    def _write(self, plan: Plan) -> bool:
        with self.lock:
            before = (dict(self.wire["metadata"].get("annotations") or {}), self.wire.get("status"))
            annotations = {**before[0], **plan.job_annotations}
            if self.gang.placed:
                annotations[ADDRESSES_ANNOTATION] = ",".join(
                    f"{r}={ip}:{port}" for r, (ip, port) in self.gang.endpoints().items()
                )
            status = plan.status.to_dict() if plan.status is not None else before[1]
            changed = (annotations, status) != before
            if changed:
                self.wire["metadata"]["annotations"] = annotations
                self.wire["status"] = status
                self._model = None
                record.save(self.key, self.wire)
            events = [(e.type, e.reason, e.message) for e in plan.events]
            for event in events:
                if event not in self._events_seen:
                    self.journal.event(*event)
            self._events_seen = set(events)
            self.lock.notify_all()
            return changed

    # --- placing ---------------------------------------------------------------------------------
    def _place(self) -> bool:
        """Reserve and start what the job still lacks; a job that cannot be placed in time is
        recorded Failed. True if the job changed (placed, or failed)."""
        timeout = self.placement.timeout_seconds
        try:
            moved = self.gang.place(timeout, self._interrupted)
        except PlacementInterrupted:
            return False
        except PlacementTimeout as exc:
            self._fail_unschedulable(timeout, str(exc))
            return True
        except RayError as exc:
            self._fail_placing(exc)
            return True
        for replica in moved:
            slot = self.gang.slots[replica]
            self.journal.mark(replica, f"placed again at {slot.address} (was {slot.history[-1]})")
        for slot in self.gang.slots.values():
            if slot.watch is None and slot.actor is not None:
                slot.watch = slot.actor.watch.remote(slot.version, slot.offset, WATCH_SECONDS)
        self.journal.event("Normal", "Placed", self._placed_message())
        return True

    def _placed_message(self) -> str:
        where = ", ".join(f"{s.replica}={s.address}" for s in self.gang.slots.values())
        return f"placed {self.placement.describe()}: {where}"

    def _fail_unschedulable(self, timeout: float, what: str) -> None:
        job = f"{self.kind.kind} {self.wire['metadata']['name']}"
        resources = (ray.cluster_resources(), ray.available_resources())
        message = unschedulable_message(job, self.placement, timeout, what, resources)
        self.journal.event("Warning", "Unschedulable", message)
        self.gang.release()
        self._record_failed(message)

    def _fail_placing(self, exc: Exception) -> None:
        message = f"a replica's actor could not start: {str(exc).strip()[-2000:]}"
        self.journal.event("Warning", "FailedCreatePod", message)
        self.gang.release()
        self._record_failed(message)

    # --- observing -------------------------------------------------------------------------------
    def _collect(self, timeout: float) -> bool:
        """Take the replicas' reports that are in (waiting up to `timeout`); True if any."""
        watching = {s.watch: s for s in self.gang.slots.values() if s.watch is not None}
        if not watching:
            return False
        ready, _ = ray.wait(list(watching), num_returns=len(watching), timeout=timeout)
        for ref in ready:
            self._take(watching[ref], ref)
        return bool(ready)

    def _take(self, slot: Slot, ref: Any) -> None:
        try:
            report = ray.get(ref)
        except ActorUnavailableError:
            slot.watch = slot.actor.watch.remote(slot.version, slot.offset, WATCH_SECONDS)
            return
        except RayError as exc:  # the actor died (or its answer was lost with its node)
            self._lose(slot, exc)
            return
        self.journal.append(slot.replica, report["log"])
        if slot.replica == self.primary and report["log"]:
            self.progress.tracker.feed_chunk(report["log"].decode(errors="replace"))
        slot.offset, slot.version = report["offset"], report["version"]
        seen = report["pod"]
        # A report sent before the pod was re-created names the same pod but tells of the old
        # one (e.g. its exit): taking it would fail the new pod and count a second restart.
        current = report["version"] >= slot.since
        if current and slot.pod is not None and seen is not None and seen["name"] == slot.pod.name:
            slot.pod = ObservedPod(**{**seen, "uid": slot.pod.uid or seen["uid"]})
            slot.running = report["running"]
        slot.watch = slot.actor.watch.remote(slot.version, slot.offset, WATCH_SECONDS)

    def _lose(self, slot: Slot, exc: Exception) -> None:
        """The slot's actor died: its pod failed without an exit code (like a lost node)."""
        node_alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}.get(slot.node_id, False)
        reason = "ReplicaLost" if node_alive else "NodeLost"
        where = f"node {slot.ip}" + ("" if node_alive else " died")
        message = f"the replica's Ray actor on {where}: {type(exc).__name__}"
        self.journal.mark(slot.replica, message)
        self.gang.forget_actor(slot)
        if slot.pod is not None and slot.pod.phase in ("Pending", "Running"):
            slot.pod = ObservedPod(
                slot.pod.name, slot.replica_type, slot.pod.index, "Failed", None,
                slot.pod.restart_count, False, reason, message, slot.pod.uid,
            )  # fmt: skip
        self.journal.event("Warning", reason, f"{slot.replica}: {message}")

    # --- progress -------------------------------------------------------------------------------
    def _follow_progress(self) -> None:
        """Write the progress the primary replica reported when due (at once once it ended)."""
        slot = self.gang.slots.get(self.primary)
        ended = slot is not None and slot.pod is not None and slot.pod.phase in FINISHED
        self._progress_wait = self.progress.flush(final=ended or self._finished())

    def _write_progress(self, status: TrainerStatus) -> None:
        with self.lock:
            annotate(self.wire, status)
            record.save(self.key, self.wire)
            self.lock.notify_all()

    def _progress_dropped(self, reason: str, detail: str) -> None:
        self.journal.event("Warning", "ProgressDropped", dropped_message(reason, detail))

    # --- requests, stopping, tearing down --------------------------------------------------------
    def _interrupted(self) -> bool:
        with self.lock:
            suspended = bool((self.wire["spec"].get("runPolicy") or {}).get("suspend"))
            return bool(self.requests) or suspended

    def _handle_requests(self) -> bool:
        with self.lock:
            requests, self.requests = self.requests, {}
        if "delete" in requests:
            self._teardown(exit_actor=False)
            return True
        if "stop" in requests and not self._finished():
            running = [s for s in self.gang.slots.values() if s.pod is not None]
            self.gang.stop_pods(running)
            self._record_failed(str(requests["stop"]))
        with self.lock:
            self.lock.notify_all()
        return False

    def _teardown(self, *, exit_actor: bool) -> None:
        self.gang.drain(self.journal.append)
        self.gang.release()
        record.remove(self.key)
        with self.lock:
            self.gone = True
            self.lock.notify_all()
        if exit_actor:  # TTL: the job deletes itself; its name and its place are then free
            with contextlib.suppress(Exception):
                release_head_slot(self.key)  # its place on the head: this ends the actor too
            with contextlib.suppress(Exception):
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def _release_if_idle(self) -> None:
        """Once nothing runs any more and the job is finished or suspended, give back its
        placement group (a resumed job is placed again)."""
        suspended = bool((self.wire["spec"].get("runPolicy") or {}).get("suspend"))
        if self.gang.pg is not None and not self._running() and (self._finished() or suspended):
            self.gang.drain(self.journal.append)
            self.gang.release()
            for slot in self.gang.slots.values():
                slot.pod = None if suspended else slot.pod
        with self.lock:
            self.settled = self._finished() and self.gang.pg is None and not self._running()
            self.lock.notify_all()

    def _record_failed(self, message: str) -> None:
        with self.lock:
            status = self.wire.get("status") or {}
            if is_finished_wire(status):
                return
            self.wire["status"] = failed_status(status, self.kind.kind, message)
            self._model = None
            record.save(self.key, self.wire)
            self.journal.event("Warning", f"{self.kind.kind}Failed", message)
            self.lock.notify_all()

    # --- small helpers ---------------------------------------------------------------------------
    def _job(self) -> Any:
        with self.lock:
            if self._model is None:
                self._model = self.kind.job_model.model_validate(copy.deepcopy(self.wire))
            return self._model

    def _finished(self) -> bool:
        return is_finished_wire(self.wire.get("status") or {})

    def _finished_after(self, plan: Plan) -> bool:
        status = plan.status.to_dict() if plan.status is not None else self.wire.get("status")
        return is_finished_wire(status or {})

    def _running(self) -> bool:
        return any(s.running for s in self.gang.slots.values())

    def _timeout(self, plan: Plan) -> float:
        candidates = [IDLE_SECONDS]
        if plan.requeue_after is not None:
            candidates.append(plan.requeue_after)
        if self._progress_wait is not None:
            candidates.append(self._progress_wait)
        return max(0.0, min(candidates))

    def _sleep(self, timeout: float) -> None:
        """Until a replica reports, a client asks for something, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while not self.gone:
            with self.lock:
                if self.requests or self.poked:
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if any(s.watch is not None for s in self.gang.slots.values()):
                if self._collect(min(left, SLICE_SECONDS)):
                    return
            else:
                with self.lock:
                    self.lock.wait(min(left, 1.0))


def remote_class() -> Any:
    """The Ray actor class of `Supervisor` (threaded: clients are served while it runs)."""
    make: Any = ray.remote  # its overloads do not know actor options
    return make(max_concurrency=64, max_restarts=record.MAX_RESTARTS)(Supervisor)
