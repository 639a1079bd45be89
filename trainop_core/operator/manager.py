"""The manager: one API client, one shared informer per resource type, every enabled controller,
leader election, the admission webhooks, /metrics, /healthz and /readyz — controller-runtime's
Manager, in threads.

Lifecycle of `run()`: serve probes and metrics -> serve the admission webhooks (every replica,
leader or not; /readyz is false until they serve with a certificate) -> start the informers
(caches warm up even on a standby replica) -> wait until they have synced -> (with
--leader-elect) wait for the Lease ->
start the workers -> block until `shutdown()` or a signal, or until the Lease is lost. Losing
the Lease fences the client (no further request leaves the process), stops the workers at once
and makes `run()` return 1, so the process exits as controller-runtime's does and Kubernetes
restarts it. Before that, every write of the reconcilers, their status updates and their events
asks the elector whether the lease is surely still held (`LeaderElector.holds_lease`), so none
goes out once a rival could have taken it, even while the renewal is stuck; the webhooks' own
writes (their certificate), which every replica makes, do not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainop_core.decorators.config import DecoratorConfig, load_decorator_config
from trainop_core.kinds.base import Kind
from trainop_core.kinds.mpi import KUBECTL_IMAGE_OPTION
from trainop_core.kinds.pytorch import INIT_IMAGE_OPTION, INIT_TRIES_OPTION
from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.operator.connection import Connection
from trainop_core.operator.controller import Caches, JobController
from trainop_core.operator.decorating import operator_decorators
from trainop_core.operator.effects import Applier
from trainop_core.operator.expectations import Expectations
from trainop_core.operator.handlers import ChildHandler, JobHandler, Siblings
from trainop_core.operator.health import PROMETHEUS, Endpoints, check_route
from trainop_core.operator.informer import Informer, ListWatch, RestListWatch
from trainop_core.operator.kube import (
    PLUGINS_POD_GROUPS,
    PODS,
    SERVICES,
    VOLCANO_POD_GROUPS,
    ApiError,
    KubeClient,
    Obj,
    Resource,
    as_connection,
    load_api_client,
)
from trainop_core.operator.leader import LeaderElector, RestLeaseStore, new_identity
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.metrics_auth import metrics_endpoint
from trainop_core.operator.observe import JOB_NAME_LABEL, cached_child, owner_index
from trainop_core.operator.options import Options
from trainop_core.operator.progress import ProgressCollector
from trainop_core.operator.recorder import EventRecorder
from trainop_core.operator.webhook import Webhooks
from trainop_core.planner.types import PlanOptions
from trainop_core.runtimes.kind import KIND as TRAINJOB_KIND
from trainop_core.runtimes.kind import split_schemes
from trainop_core.runtimes.operator import (
    CLUSTER_TRAINING_RUNTIMES,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    RuntimeHandler,
    TrainJobApplier,
    TrainJobController,
)

log = logging.getLogger(__name__)
# Threads that write the children of a reconcile (pods, services) several at a time, shared by
# every controller: a job's first reconcile takes a few round trips instead of one per child.
WRITER_THREADS = 8


def job_resource(kind: Kind) -> Resource:
    return Resource("kubeflow.org", "v1", kind.plural, kind.kind)


def pod_group_resource(gang_scheduler_name: str) -> Resource | None:
    if not gang_scheduler_name:
        return None
    return VOLCANO_POD_GROUPS if gang_scheduler_name.lower() == "volcano" else PLUGINS_POD_GROUPS


class Manager:
    """Build with options (and optionally a ready ApiClient and a decorator configuration, else
    the one `--decorators` names); `run()` blocks; `shutdown()` stops."""

    def __init__(
        self,
        options: Options,
        registry: KindRegistry | None = None,
        api_client: Any = None,
        decorators: DecoratorConfig | None = None,
    ) -> None:
        self.options = options
        v1_schemes, self.trainjobs = split_schemes(options.enable_schemes)
        base = registry or build_registry()
        # --enable-scheme TrainJob alone runs TrainJobs only (trainop_core.runtimes.operator).
        self.registry = (
            base.select(v1_schemes) if v1_schemes or not self.trainjobs else base.select_none()
        )
        self.metrics = OperatorMetrics()
        self.stop = threading.Event()
        api = as_connection(api_client or load_api_client(options.kubeconfig))
        self.identity = new_identity()
        self.elector = self._build_elector(api)
        may_write = self.elector.holds_lease if self.elector is not None else None
        self.client = KubeClient(
            api,
            options.kube_api_qps,
            options.kube_api_burst,
            self.metrics,
            self.stop,
            may_write=may_write,
        )
        self.expectations = Expectations()
        # Events go out asynchronously through their own client, on the spare tokens of the one
        # bucket: --kube-api-qps bounds every request of the process, as upstream's does.
        self.events_client = KubeClient(api, -1, 1, self.metrics, self.stop, may_write=may_write)
        self.recorder = EventRecorder(self.events_client, bucket=self.client.bucket)
        self.writers = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="writer")
        config = decorators or load_decorator_config(options.decorators or None)
        self.decorators = operator_decorators(config, self.client, self.metrics)
        self.pod_group_resource = pod_group_resource(options.gang_scheduler_name)
        self.informers: dict[str, Informer] = {}
        self.controllers: dict[str, JobController] = {}
        self._build_controllers()
        self.progress = self._build_progress(api, may_write)
        self._workers_started = threading.Event()
        self.lost_leadership = False
        self.webhooks = self._build_webhooks()
        readiness = dict(caches=self.caches_synced, running=lambda: not self.stop.is_set())
        if self.webhooks is not None:
            readiness["webhooks"] = self.webhooks.ready
        liveness = {
            "ping": lambda: True,
            "workers": lambda: all(c.workers_alive() for c in self.controllers.values()),
        }
        self.probes = Endpoints(
            options.health_probe_bind_address,
            {"/healthz": check_route(liveness), "/readyz": check_route(readiness)},
        )
        self.metrics_endpoint = metrics_endpoint(
            options, self.client.api, self.metrics, self.stop, self._metrics_route
        )

    # --- wiring ------------------------------------------------------------------------------
    def _list_watch(self, res: Resource, selector: str = "") -> ListWatch:
        return RestListWatch(
            self.client,
            res,
            self.options.namespace,
            selector,
            read_margin=self.options.watch_read_timeout,
        )

    def _informer(
        self, name: str, lw: ListWatch, transform: Callable[[Obj], Obj] | None = None
    ) -> Informer:
        informer = Informer(
            name, lw, min_watch_timeout=self.options.watch_timeout, transform=transform
        )
        self.informers[name] = informer
        return informer

    def _build_controllers(self) -> None:
        pods = self._informer("pods", self._list_watch(PODS, JOB_NAME_LABEL), cached_child)
        services = self._informer(
            "services", self._list_watch(SERVICES, JOB_NAME_LABEL), cached_child
        )
        caches = Caches(pods, services)
        for informer in (pods, services):
            informer.add_index("owner", owner_index)
        if self.pod_group_resource is not None:
            caches.pod_groups = self._informer(
                "podgroups", self._list_watch(self.pod_group_resource)
            )
        plan_options = PlanOptions(
            gang_scheduler_name=self.options.gang_scheduler_name,
            cluster_domain=self.options.cluster_domain,
            kind_options={
                INIT_IMAGE_OPTION: self.options.pytorch_init_container_image,
                INIT_TRIES_OPTION: self.options.pytorch_init_container_max_tries,
                KUBECTL_IMAGE_OPTION: self.options.mpi_kubectl_delivery_image,
            },
        )
        for kind in self.registry:
            self.controllers[kind.kind] = self._controller(kind, caches, plan_options)
        if self.trainjobs:
            self.controllers[TRAINJOB_KIND.kind] = self._trainjob_controller(caches, plan_options)
        for name in ("pods", "services", "podgroups"):
            if name in self.informers:
                siblings = _siblings(pods) if name == "pods" else None
                self.informers[name].add_handler(
                    ChildHandler(self.controllers, self.expectations, name, siblings=siblings)
                )

    def _build_progress(
        self, api: Connection, may_write: Callable[[], bool] | None
    ) -> ProgressCollector | None:
        """Training progress from the primary pods' logs (operator/progress.py), on its own
        client taking the spare tokens of the one bucket, as events do."""
        if self.options.progress_interval <= 0:
            return None
        client = KubeClient(api, -1, 1, self.metrics, self.stop, may_write=may_write)
        collector = ProgressCollector(
            client,
            self.controllers,
            self.recorder,
            self.metrics,
            self.stop,
            self.options.progress_interval,
            self.client.bucket,
        )
        self.informers["pods"].add_handler(collector)
        return collector

    def _trainjob_controller(self, caches: Caches, plan_options: PlanOptions) -> JobController:
        """TrainJobs, their runtimes read from two more shared caches."""
        controller = self._controller(
            TRAINJOB_KIND, caches, plan_options, TRAINJOBS, TrainJobApplier, TrainJobController
        )
        assert isinstance(controller, TrainJobController)  # reason: built with that class
        controller.runtimes = tuple(
            self._informer(res.plural, self._list_watch(res))
            for res in (TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES)
        )
        for informer in controller.runtimes:
            informer.add_handler(RuntimeHandler(controller))
        return controller

    def _controller(
        self,
        kind: Kind,
        caches: Caches,
        plan_options: PlanOptions,
        res: Resource | None = None,
        applier_class: type[Applier] = Applier,
        controller_class: type[JobController] = JobController,
    ) -> JobController:
        res = res or job_resource(kind)
        jobs = self._informer(kind.plural, self._list_watch(res))
        applier = applier_class(
            kind,
            res,
            self.client,
            self.recorder,
            self.expectations,
            self.metrics,
            self.pod_group_resource,
            self.writers,
        )
        controller = controller_class(
            kind,
            self.registry,
            res,
            jobs,
            caches,
            applier,
            self.client,
            self.expectations,
            self.metrics,
            plan_options,
            self.decorators,
            self.options.max_replicas_per_job,
        )
        jobs.add_handler(JobHandler(controller))
        return controller

    def _build_elector(self, api: Connection) -> LeaderElector | None:
        if not self.options.leader_elect:
            return None
        timings = self.options.lease
        # Its own client: not paced behind the reconcilers, no Retry-After waited out.
        lease_client = KubeClient(api, -1, 1, self.metrics, self.stop, retries=0)
        store = RestLeaseStore(
            lease_client,
            self.options.lease_namespace(),
            self.options.leader_election_id,
            timings.renew_deadline,
        )
        return LeaderElector(
            store,
            self.options.leader_election_id,
            self.identity,
            self.options.lease_namespace(),
            timings,
            self.metrics,
        )

    def _build_webhooks(self) -> Webhooks | None:
        if not self.options.webhook.port:
            return None
        # Every replica manages the webhook certificate, leading or not: a client without the
        # lease's fence, on the one bucket.
        client = KubeClient(
            self.client.api, -1, 1, self.metrics, self.stop, bucket=self.client.bucket
        )
        trainjobs = self.controllers.get(TRAINJOB_KIND.kind)
        runtimes = trainjobs.catalog if isinstance(trainjobs, TrainJobController) else None
        return Webhooks(
            self.options.webhook,
            self.registry,
            client,
            self.metrics.registry,
            self.trainjobs,
            runtimes,
            self.options.max_replicas_per_job,
        )

    # --- running -------------------------------------------------------------------------------
    def run(self) -> int:
        """Block until stopped; 0 after `shutdown()`, 1 on a startup failure or a lost lease."""
        try:
            return self._run()
        finally:
            self._teardown()

    def _run(self) -> int:
        self.probes.start()
        self.metrics_endpoint.start()
        if self.webhooks is not None:
            self.webhooks.start(self.stop)
        if not self._pod_group_crd_present():
            return 1
        for informer in self.informers.values():
            informer.start(self.stop)
        if not self._wait_synced():
            return 1 if not self.stop.is_set() else 0
        if self.elector is None:
            self._start_workers()
            self.stop.wait()
            return 0
        self.lost_leadership = self.elector.run(self.stop, self._start_workers)
        if self.lost_leadership:
            self.client.fence()
            self.events_client.fence()
            return 1
        return 0

    def shutdown(self) -> None:
        """Stop everything (thread-safe, idempotent; what SIGTERM/SIGINT call)."""
        self.stop.set()
        if self.progress is not None:
            self.progress.wake()
        for controller in self.controllers.values():
            controller.queue.shutdown()

    def _start_workers(self) -> None:
        for controller in self.controllers.values():
            controller.start_workers(self.options.controller_threads, self.stop)
            for job in controller.jobs.list():
                controller.enqueue(job)  # anything cached while we waited for the lease
        if self.progress is not None:  # it writes: only where the reconcilers run
            self.progress.start()
        self._workers_started.set()
        log.info("controllers started: %s", ", ".join(self.controllers))

    def _wait_synced(self) -> bool:
        for informer in self.informers.values():
            if not informer.wait_synced(self.options.cache_sync_timeout) or self.stop.is_set():
                log.error("cache of %s did not sync", informer.name)
                return False
        return True

    def _pod_group_crd_present(self) -> bool:
        """Upstream exits when gang scheduling is on but the PodGroup CRD is not installed."""
        res = self.pod_group_resource
        if res is None:
            return True
        try:
            self.client.list(res, self.options.namespace, limit=1)
        except ApiError as exc:
            if exc.not_found:
                log.error(
                    "gang scheduler %s needs the %s CRD (%s): not installed",
                    self.options.gang_scheduler_name,
                    res.kind,
                    res.api_version,
                )
                return False
        return True

    def _teardown(self) -> None:
        self.shutdown()
        self.writers.shutdown(wait=False, cancel_futures=True)
        if not self.lost_leadership:
            self.recorder.stop()
        for informer in self.informers.values():
            informer.interrupt()
        self.probes.stop()
        self.metrics_endpoint.stop()
        if self.webhooks is not None:
            self.webhooks.stop()

    # --- probes and metrics ------------------------------------------------------------------
    def caches_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers.values())

    @property
    def workers_started(self) -> bool:
        return self._workers_started.is_set()

    def _metrics_route(self) -> tuple[int, str, str]:
        self._update_job_gauges()
        return 200, PROMETHEUS, self.metrics.registry.render()

    def _update_job_gauges(self) -> None:
        running, pending = self.metrics.jobs_running, self.metrics.jobs_pending
        running.reset()
        pending.reset()
        for controller in self.controllers.values():
            for job in controller.jobs.list():
                labels = {
                    "job_namespace": job.get("metadata", {}).get("namespace", "default"),
                    "framework": controller.kind.framework,
                }
                state = _job_state(job)
                if state == "Running":
                    running.inc(**labels)
                elif state == "Pending":
                    pending.inc(**labels)


def _job_state(job: Obj) -> str:
    """Running, Pending (created, not yet running or finished, not suspended) or ""."""
    true = {
        c.get("type")
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    if true & {"Succeeded", "Failed", "Suspended"}:
        return ""
    if "Running" in true:
        return "Running"
    return "Pending" if "Restarting" not in true else ""


def _siblings(pods: Informer) -> Siblings:
    """The cached pods controlled by the same owner as a pod (itself included)."""

    def siblings(pod: Obj) -> list[Obj]:
        return [p for owner in owner_index(pod) for p in pods.by_index("owner", owner)]

    return siblings
