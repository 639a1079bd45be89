"""What a job kind is: a frozen description plus a few hooks. A kind holds no reconcile logic.

Adding a kind (a new upstream one, or a site's own) is one module that builds a `Kind` and one
line in `trainop_core.kinds.table` (or an entry point in the `trainop.kinds` group for third
parties).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import RestartPolicy
from trainop_core.errors import Problem


class Addressing(Protocol):
    """How replica `index` of type `rtype` is reached. Backends provide it, kinds only ask."""

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        """Host name or IP of that replica; `fqdn` asks for the cluster-wide form. Pure, no I/O."""
        ...

    def port(self, rtype: str, index: int) -> int:
        """The port the replica's default container listens on. Pure, no I/O."""
        ...

    @property
    def waits_for_dns(self) -> bool:
        """True where replicas find each other through DNS that may lag (Kubernetes)."""
        ...


# Settings a process backend (local, Ray) gives kind hooks through ClusterContext.kind_options:
# the program that runs a command in another replica's environment (`AGENT HOST COMMAND...`,
# what an MPI launcher's rsh agent is; Kubernetes has `kubectl exec`), and the directory where
# the ConfigMaps a kind plans (Kind.objects) are written as files (<dir>/<name>/<key>).
EXEC_AGENT_OPTION = "process.exec_agent"
CONFIGMAP_DIR_OPTION = "process.configmap_dir"


@dataclass(frozen=True)
class ClusterContext:
    """Everything an env-contract hook may read: the defaulted job, replica counts, addresses."""

    job: TrainingJob
    replicas: Mapping[str, int]  # replica type -> count, in the kind's order
    addressing: Addressing
    # Backend settings for kind hooks, keyed "<framework>.<option>" (PlanOptions.kind_options).
    kind_options: Mapping[str, object] = field(default_factory=dict)
    # Per-plan scratch space for hooks that would otherwise redo O(replicas) work for every
    # replica (TF_CONFIG's cluster map). Lives exactly as long as one plan; never shared.
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaCounts:
    """What the planner observed for one replica type this round."""

    replicas: int  # desired
    active: int = 0  # Running
    succeeded: int = 0
    failed: int = 0
    restart_policy: RestartPolicy = RestartPolicy.NEVER


@dataclass(frozen=True)
class Verdict:
    """A kind's reading of its replicas: what the job's condition should become.

    `state` is one of "Running", "Succeeded", "Failed", "Restarting" or "" (nothing to say yet).
    """

    state: str
    message: str = ""
    replica_type: str = ""


class EnvHook(Protocol):
    def __call__(self, ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
        """The contract env vars (name/value dicts) for one replica. Pure."""
        ...


class MasterRoleHook(Protocol):
    def __call__(self, replicas: Mapping[str, int], rtype: str, index: int) -> bool:
        """Whether this replica carries the `job-role: master` label (upstream's label, quirks
        included: MXNet puts it on its Servers). Not the job's result: see `primary_types`. Pure."""
        ...


class StatusHook(Protocol):
    def __call__(
        self, job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
    ) -> Verdict | Sequence[Verdict]:
        """Upstream's per-kind UpdateJobStatus rule, as a pure function of the counts.

        A sequence is applied in order, as upstream sets one condition after another in one
        pass (TF records Running before the Failed that ends the job in the same round). Pure.
        """
        ...


class ValidateHook(Protocol):
    def __call__(self, job: TrainingJob) -> list[Problem]:
        """Extra kind rules (cardinalities, options). Runs on the defaulted job. Pure."""
        ...


class DefaultHook(Protocol):
    def __call__(self, job: TrainingJob) -> None:
        """Kind-specific in-memory defaults (mutates the job). Pure apart from that."""
        ...


class PodHook(Protocol):
    def __call__(self, ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
        """Decorate a pod manifest before creation (e.g. an init container). Mutates `pod`."""
        ...


class ObjectsHook(Protocol):
    def __call__(
        self, ctx: ClusterContext, running: Mapping[str, Sequence[int]]
    ) -> list[dict[str, Any]]:
        """Objects the kind needs besides pods and services while the job runs (MPI's ConfigMap
        and launcher RBAC), each with apiVersion, kind, metadata.name and its content; the
        planner adds namespace and owner. `running`: indices of the Running pods per replica
        type. Backends create what is missing and replace what differs. Pure."""
        ...


class ProgramHook(Protocol):
    def __call__(self, rtype: str, argv: Sequence[str]) -> list[str] | None:
        """How one program an integration runs as a job (a Flyte task's function, ...) starts in
        replica type `rtype`: its main container's argv, or None for the kind's idle command
        (MPI: the launcher runs `mpirun ... argv`, which starts the ranks in the workers). Pure."""
        ...


class StartAfterHook(Protocol):
    def __call__(self, ctx: ClusterContext) -> Mapping[str, str]:
        """Replica types whose pods the planner creates only once every pod of another type
        runs (type -> the type it waits for): where the pods cannot wait themselves (MPI's
        launcher on a process backend; on Kubernetes its init container waits). Pure."""
        ...


def no_waiting(ctx: ClusterContext) -> Mapping[str, str]:
    return {}


def run_everywhere(rtype: str, argv: Sequence[str]) -> list[str] | None:
    return list(argv)  # every replica runs the program itself


def _no_problems(job: TrainingJob) -> list[Problem]:
    return []


def _no_defaults(job: TrainingJob) -> None:
    return None


def _no_pod_changes(ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
    return None


def _no_objects(ctx: ClusterContext, running: Mapping[str, Sequence[int]]) -> list[dict[str, Any]]:
    return []


@dataclass(frozen=True)
class Kind:
    """A job kind as data. Everything the generic code needs to know about TFJob, PyTorchJob, ..."""

    kind: str
    plural: str
    job_model: type[TrainingJob]
    replica_field: str  # wire name of the replica-spec map, e.g. "pytorchReplicaSpecs"
    replica_types: tuple[str, ...]  # canonical spelling, in upstream's order
    default_container: str
    port_name: str
    default_port: int
    default_restart_policy: RestartPolicy
    framework: str  # metrics label, e.g. "pytorch"
    env: EnvHook
    is_master_role: MasterRoleHook
    status: StatusHook
    env_in_all_containers: bool = True  # TF injects only into its default container
    validate: ValidateHook = _no_problems
    default: DefaultHook = _no_defaults
    decorate_pod: PodHook = _no_pod_changes
    aliases: tuple[str, ...] = ()  # other accepted `kind:` spellings (MXNetJob -> MXJob)
    short_names: tuple[str, ...] = ()
    scale_replica_type: str | None = None  # replica type behind the scale subresource, if any
    restrict_replica_types: bool = True  # TF's webhook accepts unknown replica types
    extra_printer_columns: Sequence[dict[str, Any]] = field(default_factory=tuple)
    # The replica whose output is the job's result (its log carries the metrics; a Flyte task
    # returns its value): index 0 of the first of these types the job has, else of the job's
    # first type. Separate from `is_master_role`, which keeps upstream's labels.
    primary_types: tuple[str, ...] = ()
    # Admission warnings (trainop_core.api.admission): (deprecated wire path, its replacement)
    # pairs, and a warning every job of the kind gets (the kind itself is deprecated).
    deprecated_fields: tuple[tuple[str, str], ...] = ()
    deprecation: str = ""
    # The launcher pattern (MPIJob): objects planned besides pods and services; replica types
    # whose pods are created only once every pod of another type runs; replica counts other
    # than 1 when unset ((type, count) pairs); and kinds whose replicas are reached by exec
    # rather than through a Service and a named port.
    objects: ObjectsHook = _no_objects
    start_after: StartAfterHook = no_waiting
    # (type, command) pairs: what the main container of a replica type that only hosts work
    # started from elsewhere runs when it names no command (MPI's workers: sleep 365d).
    idle_commands: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # An integration's program across the job's replicas; where a launcher starts its processes,
    # the env through which it tells each its rank (the process of rank 0 is then the primary).
    program: ProgramHook = run_everywhere
    rank_env: tuple[str, ...] = ()
    default_replicas: tuple[tuple[str, int], ...] = ()
    services: bool = True  # a headless Service per replica
    adds_default_port: bool = True  # the port_name port is added to the default container
    requires_default_container: bool = True  # a container must be named default_container

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def controller_name(self) -> str:
        """`training.kubeflow.org/operator-name` label value and event source."""
        return f"{self.kind.lower()}-controller"

    def primary_replica(self, replicas: Mapping[str, int]) -> tuple[str, int]:
        """(replica type, index) of the primary replica among `replicas` (type -> count, in the
        kind's order; see `trainop_core.replicas.replica_counts`). Pure."""
        present = [rtype for rtype, count in replicas.items() if count > 0]
        chosen = next((t for t in self.primary_types if t in present), None)
        if chosen is None:
            chosen = present[0] if present else next(iter(replicas), self.replica_types[0])
        return chosen, 0

    def canonical_replica_type(self, name: str) -> str:
        """Case-normalise a replica-type key (worker -> Worker); unknown names come back as is."""
        for known in self.replica_types:
            if known.lower() == name.lower():
                return known
        return name
