"""Helpers for the Kueue suites: queue objects, jobs of every kind Kueue drives, and watches that
record what happened (pods' CPU in use over time, the order Kueue admitted workloads in)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from builders import make_job

from trainop_core.testing.kueue import API, QUEUE_LABEL
from trainop_core.testing.rest import Rest, RestError

Obj = dict[str, Any]
GROUP = "/apis/kubeflow.org/v1"
#: kind -> (plural, replica types with their CPU in millicores per pod); every job needs 1 CPU.
SHAPES: dict[str, tuple[str, list[tuple[str, int]]]] = {
    "TFJob": ("tfjobs", [("Chief", 500), ("Worker", 500)]),
    "PyTorchJob": ("pytorchjobs", [("Master", 500), ("Worker", 500)]),
    "XGBoostJob": ("xgboostjobs", [("Master", 500), ("Worker", 500)]),
    "PaddleJob": ("paddlejobs", [("Master", 500), ("Worker", 500)]),
    "JAXJob": ("jaxjobs", [("Worker", 1000)]),
}
KINDS = list(SHAPES)
FLAVOR_LABEL = "trainop.testing/flavor"
TOLERATION_KEY = "trainop.testing/queued"


def job(kind: str, name: str, queue: str, *, cpu: int | None = None, priority: str = "") -> Obj:
    """A `kind` job in `queue`: the shape in SHAPES (each pod `cpu` millicores if given)."""
    extra = {"JAXJob": {"replica_field": "jaxReplicaSpecs", "container": "jax"}}.get(kind, {})
    builder = make_job(kind, name, **extra).labels(**{QUEUE_LABEL: queue})
    for rtype, millis in SHAPES[kind][1]:
        builder.replica(rtype, 1, restart_policy="Never", command=["python", "-c", "pass"])
        requests = {"cpu": f"{cpu or millis}m"}
        builder.container(rtype, resources={"requests": requests, "limits": requests})
    if priority:
        builder.run_policy(schedulingPolicy={"priorityClass": priority})
    return builder.build()


def job_path(namespace: str, kind: str, name: str = "") -> str:
    base = f"{GROUP}/namespaces/{namespace}/{SHAPES[kind][0]}"
    return f"{base}/{name}" if name else base


def condition(obj: Obj, kind: str) -> Obj | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def is_true(obj: Obj, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


@dataclass
class Queues:
    """A ResourceFlavor, a ClusterQueue with a CPU quota over it and a LocalQueue pointing at it."""

    rest: Rest
    namespace: str
    cpu: str = "2"
    flavor: str = ""
    cluster_queue: str = ""
    local_queue: str = "team"
    admission_check: str = ""  # an AdmissionCheck every workload must pass, if given

    def create(self) -> Queues:
        suffix = self.namespace.rsplit("-", 1)[-1]  # the namespace's random part
        self.flavor = f"flavor-{suffix}"
        self.cluster_queue = f"cq-{suffix}"
        self.rest.create(f"{API}/resourceflavors", self._flavor())
        self.rest.create(f"{API}/clusterqueues", self._cluster_queue())
        local = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": self.local_queue},
            "spec": {"clusterQueue": self.cluster_queue},
        }
        self.rest.create(f"{API}/namespaces/{self.namespace}/localqueues", local)
        return self

    def active(self) -> bool:
        path = f"{API}/namespaces/{self.namespace}/localqueues/{self.local_queue}"
        return is_true(self.rest.get(f"{API}/clusterqueues/{self.cluster_queue}"), "Active") and (
            is_true(self.rest.get(path), "Active")
        )

    def delete(self) -> None:
        for path in (
            f"{API}/clusterqueues/{self.cluster_queue}",
            f"{API}/resourceflavors/{self.flavor}",
        ):
            try:
                self.rest.delete(path)
            except RestError as err:
                if err.status != 404:
                    raise

    def _checks(self) -> Obj:
        if not self.admission_check:
            return {}
        return {"admissionChecksStrategy": {"admissionChecks": [{"name": self.admission_check}]}}

    def _flavor(self) -> Obj:
        # Kueue writes the flavor's node labels and tolerations into every admitted pod template.
        toleration = {"key": TOLERATION_KEY, "operator": "Exists", "effect": "NoSchedule"}
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": self.flavor},
            "spec": {"nodeLabels": {FLAVOR_LABEL: self.flavor}, "tolerations": [toleration]},
        }

    def _cluster_queue(self) -> Obj:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": self.cluster_queue},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                },
                "queueingStrategy": "StrictFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                **self._checks(),
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": self.flavor,
                                "resources": [{"name": "cpu", "nominalQuota": self.cpu}],
                            }
                        ],
                    }
                ],
            },
        }


def list_workloads(rest: Rest, namespace: str) -> list[Obj]:
    return list(rest.get(f"{API}/namespaces/{namespace}/workloads")["items"])


def running_pods(load: PodLoad, prefix: str, skip: set[str], count: int = 2) -> list[str]:
    """The names of the `count` running pods named `prefix`... whose uid is not in `skip`
    (e.g. a job's pods again after preemption), sorted; [] until there are that many."""
    names = [
        p["metadata"]["name"]
        for uid, p in list(load.pods.items())
        if p["metadata"]["name"].startswith(prefix)
        and uid not in skip
        and (p.get("status") or {}).get("phase") == "Running"
    ]
    return sorted(names) if len(names) == count else []


def admission_phases(
    versions: list[Obj], suspended: Callable[[Obj], bool], check: Callable[[Obj, bool], None]
) -> list[str]:
    """A job's admission history from its versions as seen: "suspended"/"admitted" each time it
    changes. `check(version, suspended)` asserts what else must hold in each version."""
    phases: list[str] = []
    for version in versions:
        held = suspended(version)
        check(version, held)
        phase = "suspended" if held else "admitted"
        if not phases or phases[-1] != phase:
            phases.append(phase)
    return phases


def millicores(quantity: str) -> int:
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return int(float(quantity) * 1000)


class Watcher:
    """Watches `path` from now on (a thread, resumed when a watch ends) and calls `on_event(type,
    object)` for every event, in the server's order. Use as a context manager."""

    def __init__(self, rest: Rest, path: str, on_event: Callable[[str, Obj], None]) -> None:
        self.rest, self.path, self.on_event = rest, path, on_event
        self._stop = threading.Event()
        self._closer: Any = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"watch {path}")
        self.error: BaseException | None = None

    def __enter__(self) -> Watcher:
        self._rv = self.rest.get(self.path)["metadata"]["resourceVersion"]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._closer is not None:
            self._closer.close()
        self._thread.join(10)
        if self.error is not None and exc[0] is None:
            raise AssertionError(f"the watch of {self.path} failed") from self.error

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                query = {"resourceVersion": self._rv, "timeoutSeconds": 60}
                self._closer, events = self.rest.stream(self.path, query, read_timeout=90)
                for event in events:
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise AssertionError(f"watch error: {obj}")
                    self._rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.on_event(event["type"], obj)
        except BaseException as exc:
            if not self._stop.is_set():
                self.error = exc


@dataclass
class PodLoad:
    """The CPU requested by pods that are neither finished nor being deleted, over time."""

    pods: dict[str, Obj] = field(default_factory=dict)  # uid -> last seen
    peak: int = 0
    peak_pods: list[str] = field(default_factory=list)
    seen: dict[str, Obj] = field(default_factory=dict)  # every pod ever seen, by uid
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, kind: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.seen[uid] = pod
            if kind == "DELETED" or _done(pod):
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
            load = sum(_cpu(p) for p in self.pods.values())
            if load > self.peak:
                self.peak = load
                self.peak_pods = sorted(p["metadata"]["name"] for p in self.pods.values())


def _done(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))


def _cpu(pod: Obj) -> int:
    return sum(
        millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for c in pod["spec"]["containers"]
    )


@dataclass
class Admissions:
    """The order Kueue admitted workloads in, and which of them it saw with pods ready."""

    order: list[Obj] = field(default_factory=list)  # each workload as first seen admitted
    pods_ready: set[str] = field(default_factory=set)  # owner job names
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, kind: str, workload: Obj) -> None:
        with self.lock:
            owner = owner_name(workload)
            if is_true(workload, "Admitted") and owner not in self.admitted():
                self.order.append(workload)
            if is_true(workload, "PodsReady"):
                self.pods_ready.add(owner)

    def admitted(self) -> list[str]:
        return [owner_name(w) for w in self.order]


def owner_name(obj: Obj) -> str:
    owners = obj["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("name", ""))


@contextmanager
def watching(rest: Rest, path: str, recorder: Callable[[str, Obj], None]) -> Iterator[None]:
    with Watcher(rest, path, recorder):
        yield
