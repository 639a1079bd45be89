"""Kubeflow Trainer v2's API (`trainer.kubeflow.org/v1alpha1`, fields of release v2.3.0):
TrainJob (what to train) and TrainingRuntime / ClusterTrainingRuntime (how).

Field names are Pythonic in code and camelCase on the wire, as for the v1 kinds; unknown fields
are refused. Kubernetes-typed parts (env, resources, the pod templates inside a runtime's JobSet
template, a patch's pod-spec subset) stay plain data here and are checked against the Kubernetes
field table by `trainop_core.api.trainjob_validation`, as the v1 kinds' pod templates are.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trainop_core.api.types import ApiModel, NamedByMetadata, ObjectMeta, Time

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

TRAINJOB = "TrainJob"
TRAINING_RUNTIME = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
RUNTIME_KINDS = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)

MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES = (MANAGED_BY_TRAINER, MANAGED_BY_MULTIKUEUE)

# Labels Trainer and the Kubeflow SDK read (the SDK lists runtimes by the framework label and
# finds the trainer step of a runtime's JobSet template by the ancestor label).
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE = "node"  # the trainer step's replicated job and its main container
LAUNCHER = "launcher"  # an mpi runtime's launcher step (replicated job), as Trainer names it


# --- TrainJob ------------------------------------------------------------------------------------


class RuntimeRef(ApiModel):
    name: str
    api_group: str | None = None  # defaults to trainer.kubeflow.org
    kind: str | None = None  # defaults to ClusterTrainingRuntime


class Trainer(ApiModel):
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[dict[str, Any]] | None = None  # V1EnvVar
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None  # V1ResourceRequirements
    num_proc_per_node: int | None = None


class DatasetInitializer(ApiModel):
    storage_uri: str | None = None
    env: list[dict[str, Any]] | None = None
    secret_ref: dict[str, Any] | None = None


class ModelInitializer(DatasetInitializer):
    pass


class Initializer(ApiModel):
    dataset: DatasetInitializer | None = None
    model: ModelInitializer | None = None


class RuntimePatch(ApiModel):
    """One manager's changes to the runtime for this job (Kueue writes its own)."""

    manager: str
    time: Time | None = None
    training_runtime_spec: dict[str, Any] | None = None  # shape checked by the validation


def pod_patch(manager: str, pod_template: dict[str, Any], step: str = NODE) -> dict[str, Any]:
    """A `runtimePatches` entry (wire form) in which `manager` sets `pod_template` (metadata
    and/or spec of a pod template) for the pods of `step`, as Kueue writes its own."""
    job = {"name": step, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


class TrainJobSpec(ApiModel):
    runtime_ref: RuntimeRef
    initializer: Initializer | None = None
    trainer: Trainer | None = None
    runtime_patches: list[RuntimePatch] | None = None
    suspend: bool | None = None
    active_deadline_seconds: int | None = None
    managed_by: str | None = None


class Condition(ApiModel):
    """metav1.Condition, as Trainer writes them."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    observed_generation: int | None = None
    last_transition_time: Time | None = None


class ChildJobStatus(ApiModel):
    name: str
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    suspended: int = 0


class TrainJobStatus(ApiModel):
    conditions: list[Condition] = Field(default_factory=list)
    jobs_status: list[ChildJobStatus] | None = None
    trainer_status: dict[str, Any] | None = None
    # trainop's own: the planner's record of the run (start time for the deadline, replica
    # counts, its Created/Running conditions). Not Trainer's; its clients ignore the field.
    planner_status: dict[str, Any] | None = None


class TrainJob(NamedByMetadata, ApiModel):
    api_version: str = API_VERSION
    kind: str = TRAINJOB
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainJobSpec
    status: TrainJobStatus | None = None


# --- runtimes ------------------------------------------------------------------------------------


class TorchPolicy(ApiModel):
    # Earlier releases' processes per node ("auto" or a count), still in Trainer's own runtimes;
    # a TrainJob's trainer.numProcPerNode wins over it.
    num_proc_per_node: int | str | None = None
    env_injection: dict[str, Any] | None = None


class MPIPolicy(ApiModel):
    num_proc_per_node: int | None = None
    mpi_implementation: str | None = None
    ssh_auth_mount_path: str | None = None
    run_launcher_as_node: bool | None = None


class FluxPolicy(ApiModel):
    num_proc_per_node: int | None = None


class MLPolicy(ApiModel):
    """numNodes and at most one framework source; none is plain ML (each node runs the command)."""

    num_nodes: int | None = None
    torch: TorchPolicy | None = None
    mpi: MPIPolicy | None = None
    xgboost: dict[str, Any] | None = None
    jax: dict[str, Any] | None = None
    flux: FluxPolicy | None = None


class Coscheduling(ApiModel):
    schedule_timeout_seconds: int | None = None


class PodGroupPolicy(ApiModel):
    coscheduling: Coscheduling | None = None
    volcano: dict[str, Any] | None = None


class ReplicatedJob(ApiModel):
    """A JobSet replicated job; `template` is a batch/v1 JobTemplateSpec (pod template inside)."""

    name: str
    group_name: str | None = None
    replicas: int | None = None
    depends_on: list[dict[str, Any]] | None = None
    template: dict[str, Any] = Field(default_factory=dict)


class JobSetSpec(ApiModel):
    replicated_jobs: list[ReplicatedJob] = Field(default_factory=list)
    network: dict[str, Any] | None = None
    success_policy: dict[str, Any] | None = None
    failure_policy: dict[str, Any] | None = None
    startup_policy: dict[str, Any] | None = None
    coordinator: dict[str, Any] | None = None
    volume_claim_policies: list[dict[str, Any]] | None = None
    ttl_seconds_after_finished: int | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class JobSetTemplate(ApiModel):
    metadata: dict[str, Any] | None = None  # labels and annotations for the JobSet
    spec: JobSetSpec = Field(default_factory=JobSetSpec)


class TrainingRuntimeSpec(ApiModel):
    ml_policy: MLPolicy | None = None
    pod_group_policy: PodGroupPolicy | None = None
    template: JobSetTemplate = Field(default_factory=JobSetTemplate)


class TrainingRuntime(ApiModel):
    """A namespaced runtime; `ClusterTrainingRuntime` is the same spec, cluster-scoped."""

    api_version: str = API_VERSION
    kind: str = TRAINING_RUNTIME
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec = Field(default_factory=TrainingRuntimeSpec)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def framework(self) -> str:
        return (self.metadata.labels or {}).get(FRAMEWORK_LABEL, "")


class ClusterTrainingRuntime(TrainingRuntime):
    kind: str = CLUSTER_TRAINING_RUNTIME


MODELS: dict[str, type[TrainJob] | type[TrainingRuntime]] = {
    TRAINJOB: TrainJob,
    TRAINING_RUNTIME: TrainingRuntime,
    CLUSTER_TRAINING_RUNTIME: ClusterTrainingRuntime,
}
