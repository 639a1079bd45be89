"""A kubelet stand-in: moves pods through their lifecycle over the API, on any API server.

It lists pods once and then watches them (one watch, resumed from the last resourceVersion, a new
list only after 410 Gone), and writes every transition through the ``pods/status`` subresource,
so watchers see real MODIFIED events. On a server that serves Nodes (a real kube-apiserver) it
acts as scheduler and kubelet of one node: it registers a Ready Node (default name
``trainop-node-<random>``, deleted on stop), binds each new pod to it through ``pods/binding``
(spec.nodeName, as a scheduler would, whatever the pod's schedulerName), serves container logs
for ``kubectl logs`` (see :mod:`trainop_core.testing._kubelet_node`) and completes the graceful
deletion of its pods at once (grace periods are not emulated). On a server without Nodes it only
writes status; pods then have no nodeName.

Automatic transitions are written as a real kubelet writes them: from the pod as last seen (the
watch, or the answer to its own last write: nobody else writes a pod's status), as a merge patch
with the pod's uid as precondition, by ``workers`` threads at once (one pod's transitions never
overlap). That is one binding and three status patches per pod, and no read. The test-driving
methods read the pod first and write it guarded by its resourceVersion.

A rule's start is due ``start_seconds`` after the pod was first seen (not after its accept was
written), and workers take the earliest due first: under a backlog, pods start in the order they
appeared, however many pods arrive at once after them (a burst of new pods does not hold back
the start of pods seen before it, whichever operator wrote them).

Automatic behaviour comes from :class:`Rule` s (first match wins); pods that match no rule stay
Pending (containers waiting in ContainerCreating) until the test drives them with :meth:`run`,
:meth:`terminate`, :meth:`restart_container` or :meth:`evict`. Restart policy is honoured when a
container exits: ``Always`` (any exit) and ``OnFailure`` (non-zero exit) restart it in place
(``restartCount`` + 1, ``lastState.terminated``, pod stays Running); otherwise the container stays
terminated and, once all are, the pod becomes Succeeded (all exit 0) or Failed. Every pod gets
podIP/hostIP 127.0.0.1. Pods bound to another node are left alone.

``Kubelet(api, rules)``: `api` is a :class:`~trainop_core.testing.rest.Rest`, a
:class:`~trainop_core.testing.controlplane.ControlPlane` (acts as its admin), or a kubeconfig
path. ``namespace`` limits it to one namespace, so several
kubelets can share a control plane.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import heapq
import itertools
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _podstatus as status
from ._kubelet_node import LogServer, PodLogs, node_object
from .rest import Closer, Rest, RestError

Pod = dict[str, Any]
log = logging.getLogger(__name__)
POD_IP = status.POD_IP
#: The User-Agent of the stand-in's requests.
USER_AGENT = "trainop-kubelet-standin"


@dataclass(frozen=True)
class Rule:
    """Automatic behaviour for pods whose name matches ``pattern`` (``ns/name`` if it has "/").

    ``exit_code`` may be a sequence: attempt *n* (restartCount *n*) exits with the *n*-th
    code, the last one repeating. ``run_seconds=None`` keeps containers running until the
    test terminates them. ``log`` is appended to each container's log when it starts.
    """

    pattern: str = "*"
    start_seconds: float = 0.0
    run_seconds: float | None = 0.0
    exit_code: int | Sequence[int] = 0
    log: str = ""

    def matches(self, namespace: str, name: str) -> bool:
        subject = f"{namespace}/{name}" if "/" in self.pattern else name
        return fnmatch.fnmatchcase(subject, self.pattern)

    def code_for(self, attempt: int) -> int:
        if isinstance(self.exit_code, int):
            return self.exit_code
        codes = list(self.exit_code)
        return codes[min(attempt, len(codes) - 1)]


class Kubelet:
    """Drives pod status through the API; start/stop or use as a context manager."""

    def __init__(
        self,
        api: Any,
        rules: Sequence[Rule] = (),
        *,
        namespace: str = "",
        node_name: str = "",
        watch_timeout: float = 60.0,
        workers: int = 4,
    ) -> None:
        self.rest = _rest_for(api)
        self.rules = list(rules)
        self.namespace = namespace
        self.node_name = node_name or f"trainop-node-{secrets.token_hex(4)}"
        self.watch_timeout = watch_timeout
        self.workers = max(1, workers)
        self.logs = PodLogs()
        self.has_nodes = False  # resolved by start(): does the server serve Nodes?
        self.lists = 0  # LISTs and WATCHes of pods made (one list, then watches resumed)
        self.watches = 0
        self._log_server: LogServer | None = None
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str, str, str, str]] = []
        self._seq = itertools.count()
        self._seen: set[str] = set()  # uids of pods accepted or being finalized
        self._known: dict[str, Pod] = {}  # uid -> the newest version of the pod we have seen
        self._pod_locks: dict[str, threading.Lock] = {}  # uid -> held while writing that pod
        self._locks_guard = threading.Lock()
        self._stop = threading.Event()
        self._closer: Closer | None = None
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 30.0) -> Kubelet:
        """Register the node (if the server has Nodes), list pods and start watching them."""
        self._register_node()
        loops = [(self._watch_loop, "kubelet-watch")]
        loops += [(self._act_loop, f"kubelet-{i}") for i in range(self.workers)]
        for target, name in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if not self._synced.wait(timeout):
            self.stop()
            raise RuntimeError(f"kubelet stand-in could not list pods within {timeout:.0f} s")
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        closer = self._closer
        if closer is not None:
            closer.close()
        for thread in self._threads:
            thread.join(timeout=10)
        if self._log_server is not None:
            self._log_server.stop()
        if self.has_nodes:
            with contextlib.suppress(RestError):
                self.rest.delete(f"/api/v1/nodes/{self.node_name}")

    def __enter__(self) -> Kubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------- test driving
    def run(self, namespace: str, name: str) -> Pod:
        """Start all containers: phase Running, ready, podIP and startTime set."""
        return self._start(namespace, name)

    def _start(self, namespace: str, name: str, uid: str = "") -> Pod:
        pod = self._write(namespace, name, status.run, uid)
        rule = self._rule(namespace, name)
        if rule and rule.log:
            for container in pod["spec"]["containers"]:
                self.append_log(namespace, name, rule.log, container["name"])
        return pod

    def terminate(
        self, namespace: str, name: str, exit_code: int = 0, container: str | None = None
    ) -> Pod:
        """Running container(s) exit with ``exit_code``; restartPolicy decides what follows."""
        return self._write(
            namespace, name, lambda p: status.exit_containers(p, container, exit_code)
        )

    def restart_container(
        self, namespace: str, name: str, container: str | None = None, exit_code: int = 1
    ) -> Pod:
        """Restart in place whatever the policy (as after a liveness failure)."""
        return self._write(
            namespace, name, lambda p: status.exit_containers(p, container, exit_code, force=True)
        )

    def evict(self, namespace: str, name: str, reason: str = "Evicted", message: str = "") -> Pod:
        """Fail the whole pod regardless of restartPolicy (node pressure, preemption)."""
        return self._write(namespace, name, lambda p: status.evict(p, reason, message))

    def append_log(self, namespace: str, name: str, text: str, container: str) -> None:
        """Add `text` to a container's log (served to ``kubectl logs`` / ``pods/log``)."""
        self.logs.append((namespace, name, container), text)

    # ------------------------------------------------------------ the node
    def _register_node(self) -> None:
        try:
            self.rest.get("/api/v1/nodes", limit=1)
        except RestError as err:
            if err.status != 404:
                raise
            return  # a server without Nodes (the in-process fake): status writes only
        self.has_nodes = True
        self._log_server = LogServer(self.logs)
        node = node_object(self.node_name, self._log_server.port)
        try:
            created = self.rest.create("/api/v1/nodes", node)
        except RestError as err:
            if err.status != 409:
                raise
            created = self.rest.get(f"/api/v1/nodes/{self.node_name}")
        created["status"] = node["status"]  # a create may drop status: write it as a kubelet does
        self.rest.replace(f"/api/v1/nodes/{self.node_name}/status", created)

    # ------------------------------------------------------------ watching
    def _pods_path(self, name: str = "", sub: str = "", namespace: str = "") -> str:
        namespace = namespace or self.namespace
        base = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return base + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    def _watch_loop(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                rv = self._watch(rv)
            except RestError as err:
                if err.status == 410:
                    rv = ""
                    continue
                if not self._stop.is_set():
                    log.info("kubelet stand-in watch: %s", err)
                    self._stop.wait(0.5)
            except Exception:  # keep the stand-in alive whatever a bad event holds
                log.exception("kubelet stand-in watch failed")
                self._stop.wait(0.5)

    def _list(self) -> str:
        answer = self.rest.get(self._pods_path())
        self.lists += 1
        for pod in answer.get("items") or []:
            self._observe(pod)
        self._synced.set()
        return str(answer["metadata"]["resourceVersion"])

    def _watch(self, rv: str) -> str:
        timeout = int(self.watch_timeout * random.uniform(1.0, 1.5))
        query = {"resourceVersion": rv, "allowWatchBookmarks": True, "timeoutSeconds": timeout}
        # A real server sends nothing on an idle watch: read for longer than it keeps it open.
        self._closer, events = self.rest.stream(self._pods_path(), query, timeout + 30.0)
        self.watches += 1
        if self._stop.is_set():  # stop() ran while the watch was opening and found no closer
            self._closer.close()
        try:
            for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise RestError(int(obj.get("code", 0)), str(obj.get("reason", "")))
                rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                if kind in ("ADDED", "MODIFIED"):
                    self._observe(obj)
                elif kind == "DELETED":
                    self._forget(obj["metadata"]["uid"])
                    self.logs.finish(obj["metadata"]["namespace"], obj["metadata"]["name"])
        finally:
            self._closer.close()
        return rv

    def _observe(self, pod: Pod) -> None:
        meta, node = pod["metadata"], pod.get("spec", {}).get("nodeName")
        if self.has_nodes and node not in (None, "", self.node_name):
            return  # another node's pod
        self._remember(pod)
        if meta.get("deletionTimestamp"):
            if self.has_nodes and node == self.node_name:
                self._schedule(0.0, "finalize", pod)  # graceful deletion waits for the kubelet
            return
        if meta["uid"] not in self._seen:
            self._seen.add(meta["uid"])
            self._schedule(0.0, "accept", pod)

    # ------------------------------------------------------------ automatic
    def _rule(self, namespace: str, name: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(namespace, name)), None)

    def _schedule(self, delay: float, action: str, pod: Pod, after: float | None = None) -> None:
        """Queue `action` for `pod` `delay` seconds after `after` (a monotonic time; now if
        None). Workers take the earliest due first."""
        meta = pod["metadata"]
        due = (time.monotonic() if after is None else after) + delay
        entry = (due, next(self._seq), action, meta["namespace"], meta["name"], meta["uid"])
        with self._cond:
            heapq.heappush(self._heap, entry)
            self._cond.notify()

    def _act_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop.is_set() and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stop.is_set():
                    return
                due, _, action, namespace, name, uid = heapq.heappop(self._heap)
            try:
                self._act(action, namespace, name, uid, due)
            except RestError as err:
                if err.status not in (404, 409, 422):  # gone, or re-created (a new uid)
                    log.warning("kubelet %s %s/%s failed: %s", action, namespace, name, err)

    def _act(self, action: str, namespace: str, name: str, uid: str, due: float) -> None:
        if action == "finalize":
            self._finalize(namespace, name, uid)
            return
        rule = self._rule(namespace, name)
        if action == "accept":
            pod = self._patch(namespace, name, uid, status.accept)
            if rule is not None:
                # Due `start_seconds` after the pod was seen, not after this write: under a
                # backlog, a pod accepted late still starts before pods seen after it are
                # accepted (re-queued behind them, a burst of new pods would hold every
                # earlier pod's start back, and the burstier writer's pods would start later).
                self._schedule(rule.start_seconds, "run", pod, after=due)
        elif action == "run" and rule is not None:
            pod = self._patch(namespace, name, uid, status.run)
            if rule.log:
                for container in pod["spec"]["containers"]:
                    self.append_log(namespace, name, rule.log, container["name"])
            if rule.run_seconds is not None:
                self._schedule(rule.run_seconds, "exit", pod)
        elif action == "exit" and rule is not None:

            def exit_attempt(p: Pod) -> Pod:
                return status.exit_containers(p, None, rule.code_for(status.attempt(p)))

            pod = self._patch(namespace, name, uid, exit_attempt)
            if pod["status"].get("phase") == "Running" and rule.run_seconds is not None:
                self._schedule(rule.run_seconds, "exit", pod)

    def _finalize(self, namespace: str, name: str, uid: str) -> None:
        """What a kubelet does once a pod's containers are gone: delete it for good."""
        self.logs.finish(namespace, name)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        body["preconditions"] = {"uid": uid}
        self.rest.delete(self._pods_path(name, namespace=namespace), body)

    # ------------------------------------------------------------ writing
    def _write(self, namespace: str, name: str, change: Callable[[Pod], Pod], uid: str = "") -> Pod:
        """Read the pod, bind it to the node if it is not yet, write `change(pod)` through
        ``pods/status``; again on a conflict. A different `uid` (the pod was re-created under the
        same name) raises a 404 RestError: that pod has its own schedule."""
        path = self._pods_path(name, namespace=namespace)
        for _ in range(20):
            pod = self.rest.get(path)
            if uid and pod["metadata"]["uid"] != uid:
                raise RestError(404, "NotFound", f"pod {namespace}/{name} was re-created")
            with self._pod_lock(pod["metadata"]["uid"]):
                if self.has_nodes and not pod["spec"].get("nodeName"):
                    pod = self._bind(pod)
                try:
                    written = self.rest.replace(f"{path}/status", change(copy.deepcopy(pod)))
                except RestError as err:
                    if err.status == 409:
                        continue
                    raise
                return self._written(written)
        raise RestError(409, "Conflict", f"pod {namespace}/{name} kept changing under the kubelet")

    def _patch(self, namespace: str, name: str, uid: str, change: Callable[[Pod], Pod]) -> Pod:
        """An automatic transition: `change` the newest pod we know (bound to our node first, if
        it is not) and merge-patch its status, with the uid as precondition. No read: nobody
        else writes a pod's status, so what we saw or wrote last is what the server holds.
        A pod we never saw (no watch event yet) is written the read-first way."""
        with self._pod_lock(uid):
            pod = self._known.get(uid)
            if pod is None:
                return self._write(namespace, name, change, uid)
            path = self._pods_path(name, namespace=namespace)
            if self.has_nodes and not pod["spec"].get("nodeName"):
                self._bind_only(pod)
            changed = change(copy.deepcopy(pod))
            patch = {
                "metadata": {"uid": uid},
                "status": status.merge_patch(pod.get("status") or {}, changed["status"]),
            }
            return self._written(self.rest.patch(f"{path}/status", patch))

    def _written(self, pod: Pod) -> Pod:
        self._remember(pod)
        if status.is_terminal(pod):
            self.logs.finish(pod["metadata"]["namespace"], pod["metadata"]["name"])
        return pod

    # ------------------------------------------------------------ what we know of each pod
    def _pod_lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._pod_locks.setdefault(uid, threading.Lock())

    def _remember(self, pod: Pod) -> None:
        """Keep `pod` unless we already hold a newer version (our own write may overtake the
        watch event of an older one)."""
        uid = pod["metadata"]["uid"]
        with self._locks_guard:
            held = self._known.get(uid)
            if held is None or _version(pod) >= _version(held):
                self._known[uid] = pod

    def _forget(self, uid: str) -> None:
        self._seen.discard(uid)
        with self._locks_guard:
            self._known.pop(uid, None)
            self._pod_locks.pop(uid, None)

    def _bind(self, pod: Pod) -> Pod:
        with contextlib.suppress(RestError):  # 409: bound meanwhile (by us, or someone else)
            self._post_binding(pod)
        meta = pod["metadata"]
        return self.rest.get(self._pods_path(meta["name"], namespace=meta["namespace"]))

    def _bind_only(self, pod: Pod) -> None:
        """Bind `pod` to our node (a 409 means it was bound already) and note the node locally."""
        try:
            self._post_binding(pod)
        except RestError as err:
            if err.status != 409:
                raise
        pod["spec"]["nodeName"] = self.node_name

    def _post_binding(self, pod: Pod) -> None:
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        path = self._pods_path(meta["name"], namespace=meta["namespace"])
        self.rest.create(f"{path}/binding", binding)


def _version(pod: Pod) -> int:
    """A pod's resourceVersion as a number (etcd's revision; opaque elsewhere: then 0)."""
    text = str(pod.get("metadata", {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else 0


def _rest_for(api: Any) -> Rest:
    if isinstance(api, Rest):
        return api.with_user_agent(USER_AGENT)
    if isinstance(api, str | Path):
        return Rest.from_kubeconfig(api, user_agent=USER_AGENT)
    if hasattr(api, "rest_for") and hasattr(api, "admin_token"):  # ControlPlane
        rest: Rest = api.rest_for(api.admin_token, user_agent=USER_AGENT)
        return rest
    raise TypeError(f"Kubelet needs a Rest, a ControlPlane or a kubeconfig: {api!r}")
