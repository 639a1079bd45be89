"""The process node's kubelet: its Node and Lease, the pods bound to it, their processes.

Three loops. The heartbeat (a thread) renews the Lease every `heartbeat` seconds. The watch (a
thread) lists and watches the pods whose ``spec.nodeName`` is this node and keeps the newest of
each. The sync loop (the caller's thread, so that the containers' parent-death signal follows the
node itself) moves every pod on: admits new ones (network sandbox, volumes, a
:class:`~trainop_core.node.podrun.PodRun`), polls their processes, writes their status when it
changed (a merge patch of ``pods/status`` guarded by the uid), terminates the ones being deleted
and, once their processes are gone, deletes them for good (grace 0), as a kubelet does.

A node restarted after a crash first kills whatever its pods' processes left (their cgroups,
their markers); pods it ran before are taken up again as if their containers had died with it:
restarted by their restartPolicy (restartCount + 1) or, with ``Never``, ended with exit code 137.
"""

from __future__ import annotations

import logging
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trainop_core.backends.local.procs import POD_MARKER, kill_marked
from trainop_core.node import logs
from trainop_core.node.cgroups import Cgroups, delete_base
from trainop_core.node.containers import Launch
from trainop_core.node.endpoint import NodeContainers
from trainop_core.node.events import EventRecorder, PodRef
from trainop_core.node.images import program
from trainop_core.node.podenv import ConfigError, container_env, downward_fields, service_link_env
from trainop_core.node.podrun import DEFAULT_GRACE, PodRun
from trainop_core.node.probecheck import PodProber
from trainop_core.node.registration import NodeConfig, ensure_ready, register, renew_lease
from trainop_core.node.runtime_env import RestObjects, base_env, install_tools, pod_hostname
from trainop_core.node.sandbox import HostNetwork, PodNetwork, Sandbox
from trainop_core.node.tokens import ServiceAccountTokens
from trainop_core.node.volumes import container_mounts, prepare_volumes, write_tokens
from trainop_core.testing.rest import Rest, RestError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
PROBE_THREADS = 8  # probes of every pod share them; each probe is bounded by its timeout


class ProcessNode:
    """A kubelet whose containers are processes of this machine. `run` until `stop`."""

    def __init__(
        self,
        rest: Rest,
        config: NodeConfig,
        root: Path,
        *,
        network: PodNetwork | None = None,
        cgroups: Cgroups | None = None,
        image_roots: dict[str, str] | None = None,
        heartbeat: float = 10.0,
    ) -> None:
        self.rest = rest
        self.config = config
        self.root = root
        self.network = network or HostNetwork()
        self.cgroups = cgroups
        self.image_roots = dict(image_roots or {})
        self.heartbeat = heartbeat
        self.objects = RestObjects(rest)
        self.tokens = ServiceAccountTokens(rest)
        self._api_links: dict[str, str] | None = None  # the `kubernetes` Service's env
        self.containers = NodeContainers(self.logs_root)  # what the kubelet endpoint reads
        self.stopping = threading.Event()
        self.node_uid = ""
        self._cond = threading.Condition()
        self._seen: dict[str, Obj] = {}  # uid -> newest pod bound to us
        self._synced = threading.Event()
        self.runs: dict[str, PodRun] = {}
        self._sandboxes: dict[str, Sandbox] = {}
        self._written: dict[str, Obj] = {}  # uid -> the status last written
        self._finalized: set[str] = set()
        self._closer: Any = None
        self.events = EventRecorder(rest, config.name)
        self._probe_pool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")

    @property
    def logs_root(self) -> Path:
        return self.root / "logs"

    # --- lifecycle -----------------------------------------------------------------------------
    def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Register, start the heartbeat and the watch, and sync pods until :meth:`stop`."""
        self.node_uid = register(self.rest, self.config)["metadata"]["uid"]
        renew_lease(self.rest, self.config, self.node_uid)
        install_tools(self.root / "bin")
        self.events.start()
        self._clean_leftovers()
        for target, name in ((self._heartbeat_loop, "lease"), (self._watch_loop, "watch")):
            threading.Thread(target=target, name=name, daemon=True).start()
        self._synced.wait(60)
        if on_ready is not None:
            on_ready()
        try:
            while not self.stopping.is_set():
                with self._cond:
                    self._cond.wait(0.1)
                self.sync_once()
        finally:
            self._shutdown()

    def stop(self) -> None:
        self.stopping.set()
        with self._cond:
            self._cond.notify_all()
        closer = self._closer
        if closer is not None:
            closer.close()

    def _shutdown(self) -> None:
        """A clean stop: every container gets SIGTERM, then SIGKILL after its grace (at most
        10 s); the Node stays registered (it goes NotReady once its lease expires)."""
        now = time.monotonic()
        for run in self.runs.values():
            run.terminate(min(10.0, DEFAULT_GRACE), now)
        deadline = now + 10.0
        while any(not r.stopped for r in self.runs.values()) and time.monotonic() < deadline:
            for run in self.runs.values():
                run.poll(time.monotonic())
            time.sleep(0.05)
        for uid, run in list(self.runs.items()):
            run.kill()
            self._release(uid)
        self._probe_pool.shutdown(wait=False, cancel_futures=True)
        self.events.stop()
        if self.cgroups is not None:
            delete_base(self.cgroups)
        self.network.stop()

    # --- heartbeat -----------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        beats = 0
        while not self.stopping.wait(self.heartbeat):
            beats += 1
            try:
                renew_lease(self.rest, self.config, self.node_uid)
                if beats % 6 == 0:
                    ensure_ready(self.rest, self.config)
            except RestError as err:
                log.warning("node %s heartbeat failed: %s", self.config.name, err)

    # --- watch ---------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        rv = ""
        while not self.stopping.is_set():
            try:
                rv = rv or self._list()
                rv = self._watch(rv)
            except RestError as err:
                rv = "" if err.status == 410 else rv
                if err.status != 410 and not self.stopping.is_set():
                    log.info("node %s pod watch: %s", self.config.name, err)
                    self.stopping.wait(0.5)
            except Exception:  # keep the node alive whatever one event holds
                log.exception("node %s pod watch failed", self.config.name)
                self.stopping.wait(0.5)

    def _selector(self) -> dict[str, Any]:
        return {"fieldSelector": f"spec.nodeName={self.config.name}"}

    def _list(self) -> str:
        answer = self.rest.get("/api/v1/pods", **self._selector())
        with self._cond:
            self._seen = {p["metadata"]["uid"]: p for p in answer.get("items") or []}
            self._cond.notify_all()
        self._synced.set()
        return str(answer["metadata"]["resourceVersion"])

    def _watch(self, rv: str) -> str:
        timeout = int(60 * random.uniform(1.0, 1.5))
        query = {**self._selector(), "resourceVersion": rv, "allowWatchBookmarks": True,
                 "timeoutSeconds": timeout}  # fmt: skip
        self._closer, events = self.rest.stream("/api/v1/pods", query, timeout + 30.0)
        try:
            for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise RestError(int(obj.get("code", 0)), str(obj.get("reason", "")))
                rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._observe(kind, obj)
        finally:
            self._closer.close()
        return rv

    def _observe(self, kind: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        with self._cond:
            if kind == "DELETED":
                self._seen.pop(uid, None)
            else:
                self._seen[uid] = pod
            self._cond.notify_all()

    # --- sync ----------------------------------------------------------------------------------
    def sync_once(self) -> None:
        """One pass over every pod: admit, poll, write status, finish deletions."""
        with self._cond:
            seen = dict(self._seen)
        for pod in seen.values():
            try:
                self._sync(pod)
            except RestError as err:
                if err.status not in (404, 409, 422):
                    log.warning("node %s: pod %s: %s", self.config.name, _key(pod), err)
        for uid in [u for u in self.runs if u not in seen]:  # deleted for good meanwhile
            self.runs[uid].kill()
            self._release(uid)

    def _sync(self, pod: Obj) -> None:
        uid, meta = pod["metadata"]["uid"], pod["metadata"]
        if uid in self._finalized:
            return
        run = self.runs.get(uid)
        if run is None:
            if (pod.get("status") or {}).get("phase") in TERMINAL or meta.get("deletionTimestamp"):
                self._finish_unknown(pod)
                return
            run = self._admit(pod)
        now = time.monotonic()
        if meta.get("deletionTimestamp"):
            run.terminate(_grace(pod), now)
        run.poll(now)
        if run.phase not in TERMINAL and not run.terminating and self.tokens.due(uid):
            self._refresh_tokens(pod)
        self._write_status(pod, run)
        if run.terminating and run.stopped:
            self._finalize(pod)
        elif run.phase in TERMINAL and self.cgroups is not None:
            self.cgroups.remove_pod(uid)

    def _refresh_tokens(self, pod: Obj) -> None:
        """Rewrite the pod's projected tokens that are due (80 % of their lifetime)."""
        volumes = self.root / "pods" / pod["metadata"]["uid"] / "volumes"
        try:
            write_tokens(pod, volumes, self.tokens)
        except (ConfigError, OSError) as exc:  # tried again on the next pass
            log.warning("pod %s: token refresh failed: %s", _key(pod), exc)

    def api_service_env(self) -> dict[str, str]:
        """The `kubernetes` Service's links (``KUBERNETES_SERVICE_HOST``...), every container's
        way to the API; read once (its address does not change), none until it exists."""
        if self._api_links is None:
            try:
                service = self.rest.get("/api/v1/namespaces/default/services/kubernetes")
            except RestError as err:
                if err.status != 404:
                    raise ConfigError(f"cannot read the kubernetes Service: {err}") from err
                return {}
            self._api_links = service_link_env(service)
        return self._api_links

    def _finish_unknown(self, pod: Obj) -> None:
        """A pod this run of the node never ran (finished before, or being deleted): nothing of
        it may be left running; a deleted one is removed for good."""
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            self._kill_remains(uid, pod)
            self._finalize(pod)

    def _admit(self, pod: Obj) -> PodRun:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        self._kill_remains(uid, pod)
        subdomain = str(spec.get("subdomain") or "")
        sandbox = self.network.sandbox(
            meta["namespace"], meta["name"], uid, pod_hostname(pod), subdomain
        )
        self._sandboxes[uid] = sandbox
        prober = PodProber(
            self._probe_pool, self.network.connect, sandbox.ip, self.events, PodRef.of(pod)
        )
        run = PodRun(pod, self._launcher(pod, sandbox), sandbox.ip, self.config.address, prober)
        _resume(run, pod)
        self.runs[uid] = run
        self.containers.add(meta["namespace"], meta["name"], uid, run)
        log.info("admitted pod %s (ip %s)", _key(pod), sandbox.ip)
        return run

    def _launcher(self, pod: Obj, sandbox: Sandbox) -> Callable[[Obj, int], Launch]:
        meta = pod["metadata"]
        pod_dir = self.root / "pods" / meta["uid"]
        log_dir = logs.pod_log_dir(self.logs_root, meta["namespace"], meta["name"], meta["uid"])
        fields = downward_fields(pod, self.config.name, sandbox.ip, self.config.address)
        allocatable = self.config.allocatable
        inherited = base_env(pod, self.root / "bin")

        def launch(container: Obj, restart: int) -> Launch:
            volumes = prepare_volumes(
                pod, pod_dir / "volumes", fields, allocatable, self.objects, self.tokens
            )
            mounts = container_mounts(container, volumes)
            links = self.api_service_env()
            env = container_env(pod, container, fields, allocatable, self.objects, links)
            prog = program(container, self.image_roots)
            argv = tuple(_expand(word, env) for word in prog.argv)
            limits = (container.get("resources") or {}).get("limits") or {}
            cgroup = (
                self.cgroups.create(meta["uid"], container["name"], limits)
                if self.cgroups is not None
                else None
            )
            workdir = prog.cwd or str(pod_dir / "work")
            Path(workdir).mkdir(parents=True, exist_ok=True)
            log_path = logs.log_file(log_dir, container["name"], restart)
            mounted = mounts if _can_mount() else ()
            full_env = {**inherited, **env}
            return Launch(argv, full_env, workdir, log_path, cgroup, mounted, sandbox.wrap)

        return launch

    def _write_status(self, pod: Obj, run: PodRun) -> None:
        uid, meta = pod["metadata"]["uid"], pod["metadata"]
        status = run.status()
        last: Obj = self._written.get(uid) or pod.get("status") or {}
        patch = {key: value for key, value in status.items() if last.get(key) != value}
        if not patch:
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        self.rest.patch(path, {"metadata": {"uid": uid}, "status": patch})
        self._written[uid] = {**last, **status}

    def _finalize(self, pod: Obj) -> None:
        """The pod's processes are gone: delete it for good, release what it held."""
        meta = pod["metadata"]
        uid = meta["uid"]
        self._finalized.add(uid)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}  # fmt: skip
        try:
            self.rest.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
        finally:
            self._release(uid)

    def _release(self, uid: str) -> None:
        self.runs.pop(uid, None)
        self.tokens.forget(uid)
        self.containers.remove(uid)
        self._written.pop(uid, None)
        sandbox = self._sandboxes.pop(uid, None)
        if sandbox is not None:
            sandbox.close()
        if self.cgroups is not None:
            self.cgroups.remove_pod(uid)
        shutil.rmtree(self.root / "pods" / uid, ignore_errors=True)
        for directory in self.logs_root.glob(f"*_{uid}"):  # a kubelet removes them with the pod
            shutil.rmtree(directory, ignore_errors=True)

    def _kill_remains(self, uid: str, pod: Obj) -> None:
        """Kill processes an earlier run of this node left for pod `uid`."""
        if self.cgroups is not None:
            self.cgroups.remove_pod(uid)
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            kill_marked(POD_MARKER, f"{uid}/{container['name']}")

    def _clean_leftovers(self) -> None:
        """At start: kill every process left in this node's cgroups by an earlier run."""
        if self.cgroups is None:
            return
        for uid in self.cgroups.pod_uids():
            self.cgroups.remove_pod(uid)


def _resume(run: PodRun, pod: Obj) -> None:
    """A pod an earlier run of this node ran: its containers died with that run."""
    status = pod.get("status") or {}
    previous = {s["name"]: s for s in [*(status.get("initContainerStatuses") or []),
                                       *(status.get("containerStatuses") or [])]}  # fmt: skip
    for container in (*run.init, *run.main):
        before = previous.get(container.name)
        if not before or not before.get("containerID"):
            continue
        container.restart_count = int(before.get("restartCount", 0))
        container.runs = 1
        ended = (before.get("state") or {}).get("terminated")
        if ended and (ended.get("exitCode") == 0 or container in run.main):
            container.state = {"terminated": ended}
            continue
        lost = {"exitCode": 137, "reason": "Error", "message": "the node restarted",
                "containerID": before["containerID"]}  # fmt: skip
        if run.policy == "Never":
            container.state = {"terminated": lost}
        else:
            container.last_state = {"terminated": lost}


def _grace(pod: Obj) -> float:
    meta, spec = pod["metadata"], pod["spec"]
    seconds = meta.get("deletionGracePeriodSeconds")
    if seconds is None:
        seconds = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE)
    return float(seconds)


def _expand(word: str, env: dict[str, str]) -> str:
    from trainop_core.backends.process.podspec import expand

    return expand(word, env.get)


_MOUNTS_USABLE: list[bool] = []


def _can_mount() -> bool:
    """Bind mounts need root (a mount namespace per container); said once when not usable."""
    if not _MOUNTS_USABLE:
        import os

        _MOUNTS_USABLE.append(os.geteuid() == 0)
        if not _MOUNTS_USABLE[0]:
            log.warning("not root: volumes are not mounted at their mountPath (see docs)")
    return _MOUNTS_USABLE[0]


def _key(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"


def install_signal_handlers(node: ProcessNode) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: node.stop())


__all__ = ["ProcessNode", "install_signal_handlers"]
