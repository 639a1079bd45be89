"""Kubeflow Trainer v2's API (`trainer.kubeflow.org/v1alpha1`, fields of release v2.3.0):
TrainJob (what to train) and TrainingRuntime / ClusterTrainingRuntime (how).

Field names are Pythonic in code and camelCase on the wire, as for the v1 kinds; unknown fields
are refused. Kubernetes-typed parts (env, resources, the pod templates inside a runtime's JobSet
template, a patch's pod-spec subset) stay plain data here and are checked against the Kubernetes
field table by `trainop_core.api.trainjob_validation`, as the v1 kinds' pod templates are.

Each field carries the markers Trainer's Go types give it (defaults, enums, bounds, list types,
CEL rules), the way kubebuilder markers sit on Trainer's structs: pydantic checks the bounds and
enums where trainop reads a TrainJob, and `trainop_core.runtimes.crds` turns them into the CRDs
(tests/core/test_trainer_crd_facts.py compares them with Trainer v2.3's). CEL rules are only
the API server's to run; `api.trainjob_validation` checks what they say by hand.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

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


# --- markers (what kubebuilder's markers say on Trainer's Go types) -------------------------------

Marks = dict[str, Any]  # JSON-schema keywords a field adds to its CRD schema


def cel(*rules: tuple[str, str]) -> Marks:
    """x-kubernetes-validations: (rule, message) pairs the API server checks."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


def list_map(*keys: str) -> Marks:
    """A list the API server merges and keeps unique by `keys` (listType=map)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def markers(*parts: Marks) -> Marks:
    """Several markers of one field (each kind of marker given once)."""
    return {key: value for part in parts for key, value in part.items()}


IMMUTABLE = ("self == oldSelf", "field is immutable")
VALUE_IMMUTABLE = ("self == oldSelf", "Value is immutable")  # JobSet's wording
ATOMIC: Marks = {"x-kubernetes-list-type": "atomic"}
INT32: Marks = {"format": "int32"}
INT64: Marks = {"format": "int64"}
Int32 = Annotated[int, Field(json_schema_extra=INT32)]
Name253 = Annotated[str, Field(min_length=1, max_length=253)]
# Trainer's names: the TrainJob's (RFC 1035 label); a list of EnvVars keyed by name.
_NAME_RULES = cel(
    (
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must match RFC 1035 DNS label format",
    ),
    ("size(self.metadata.name) <= 63", "metadata.name must be no more than 63 characters"),
)
EnvList = list[dict[str, Any]]  # V1EnvVar, typed in the CRD from the Kubernetes field table
_ENV = list_map("name")
_STORAGE_URI = cel(
    (
        "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
        "storageUri may be empty, or it must be a valid URI (scheme://...)",
    )
)
_MANAGED_BY = cel(
    (
        "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']",
        "ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
        "kueue.x-k8s.io/multikueue if set",
    ),
    IMMUTABLE,
)


def _config(**extra: Any) -> ConfigDict:
    return ApiModel.model_config | ConfigDict(json_schema_extra=extra)


# --- TrainJob ------------------------------------------------------------------------------------


class RuntimeRef(ApiModel):
    name: Name253
    api_group: str = Field(GROUP, max_length=253)
    kind: str = Field(CLUSTER_TRAINING_RUNTIME, max_length=253)


Arg = Annotated[str, Field(max_length=1048576)]


class Trainer(ApiModel):
    image: str | None = Field(None, max_length=500)
    command: list[Arg] | None = Field(None, max_length=128, json_schema_extra=ATOMIC)
    args: list[Arg] | None = Field(None, max_length=128, json_schema_extra=ATOMIC)
    env: EnvList | None = Field(None, max_length=128, json_schema_extra=_ENV)
    num_nodes: Int32 | None = None
    resources_per_node: dict[str, Any] | None = None  # V1ResourceRequirements
    num_proc_per_node: Int32 | None = None


class DatasetInitializer(ApiModel):
    storage_uri: str | None = Field(None, max_length=2048, json_schema_extra=_STORAGE_URI)
    env: EnvList | None = Field(None, max_length=128, json_schema_extra=_ENV)
    secret_ref: dict[str, Any] | None = None  # V1LocalObjectReference


class ModelInitializer(DatasetInitializer):
    pass


class Initializer(ApiModel):
    dataset: DatasetInitializer | None = None
    model: ModelInitializer | None = None


class RuntimePatch(ApiModel):
    """One manager's changes to the runtime for this job (Kueue writes its own)."""

    manager: str = Field(min_length=1, max_length=253, json_schema_extra=cel(IMMUTABLE))
    time: Time | None = None
    # Trainer's TrainingRuntimeSpecPatch: its shape is checked by the validation and typed in
    # the CRD (`runtimes.crds`), with the pod-spec subset a patch may set.
    training_runtime_spec: dict[str, Any] | None = None


def pod_patch(manager: str, pod_template: dict[str, Any], step: str = NODE) -> dict[str, Any]:
    """A `runtimePatches` entry (wire form) in which `manager` sets `pod_template` (metadata
    and/or spec of a pod template) for the pods of `step`, as Kueue writes its own."""
    job = {"name": step, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


class TrainJobSpec(ApiModel):
    runtime_ref: RuntimeRef = Field(json_schema_extra=cel(IMMUTABLE))
    initializer: Initializer | None = Field(None, json_schema_extra=cel(IMMUTABLE))
    trainer: Trainer | None = Field(None, json_schema_extra=cel(IMMUTABLE))
    runtime_patches: list[RuntimePatch] | None = Field(
        None, max_length=16, json_schema_extra=list_map("manager")
    )
    suspend: bool = False
    active_deadline_seconds: int | None = Field(
        None, ge=1, json_schema_extra=markers(INT64, cel(IMMUTABLE))
    )
    managed_by: str = Field(MANAGED_BY_TRAINER, max_length=253, json_schema_extra=_MANAGED_BY)


ConditionReason = Annotated[
    str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
]
ConditionTypeName = Annotated[
    str,
    Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    ),
]


class Condition(ApiModel):
    """metav1.Condition, as Trainer writes them."""

    type: ConditionTypeName
    status: Literal["True", "False", "Unknown"]
    reason: ConditionReason
    message: str = Field(max_length=32768)
    observed_generation: int | None = Field(None, ge=0, json_schema_extra=INT64)
    last_transition_time: Time


Count = Annotated[int, Field(ge=0, json_schema_extra=INT32)]


class ChildJobStatus(ApiModel):
    name: Name253
    ready: Count
    succeeded: Count
    failed: Count
    active: Count
    suspended: Count


class Metric(ApiModel):
    name: str = Field(min_length=1, max_length=64)
    value: str = Field(min_length=1, max_length=64)


class TrainerStatus(ApiModel):
    """Trainer's alpha `status.trainerStatus` (progress and metrics; trainop_core.progress)."""

    model_config = _config(
        **cel(
            (
                "has(self.lastUpdatedTime)",
                "lastUpdatedTime is required when trainerStatus is present",
            )
        )
    )

    progress_percentage: int | None = Field(None, ge=0, le=100, json_schema_extra=INT32)
    estimated_remaining_seconds: int | None = Field(None, ge=0, json_schema_extra=INT32)
    metrics: list[Metric] | None = Field(None, max_length=256, json_schema_extra=ATOMIC)
    last_updated_time: Time | None = None


class TrainJobStatus(ApiModel):
    model_config = _config(minProperties=1)

    conditions: list[Condition] = Field(
        default_factory=list, max_length=8, json_schema_extra=list_map("type")
    )
    jobs_status: list[ChildJobStatus] | None = Field(
        None, max_length=100, json_schema_extra=list_map("name")
    )
    trainer_status: TrainerStatus | None = None
    # trainop's own: the planner's record of the run (start time for the deadline, replica
    # counts, its Created/Running conditions). Not Trainer's; its clients ignore the field.
    planner_status: dict[str, Any] | None = None


class TrainJob(NamedByMetadata, ApiModel):
    model_config = _config(**_NAME_RULES)

    api_version: str = API_VERSION
    kind: str = TRAINJOB
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainJobSpec
    status: TrainJobStatus | None = None


# --- runtimes ------------------------------------------------------------------------------------


class EnvInjectionTarget(ApiModel):
    job_name: Name253
    container_names: list[Annotated[str, Field(max_length=63)]] = Field(
        min_length=1,
        max_length=8,
        json_schema_extra=markers(
            {"x-kubernetes-list-type": "set"},
            cel(
                (
                    "!self.exists(c, c == 'node')",
                    "containerNames must not include the main node container because PET_* "
                    "envs are always injected into it",
                )
            ),
        ),
    )


class EnvInjection(ApiModel):
    targets: list[EnvInjectionTarget] | None = Field(
        None, max_length=16, json_schema_extra=list_map("jobName")
    )


class TorchPolicy(ApiModel):
    # Trainer v2.0/v2.1's processes per node ("auto" or a count), removed in v2.2 (trainer#3239);
    # still read here so that such runtimes keep their count. trainop's own, not in Trainer's CRD.
    num_proc_per_node: int | str | None = None
    env_injection: EnvInjection | None = None


class MPIPolicy(ApiModel):
    num_proc_per_node: Int32 = 1
    mpi_implementation: Literal["OpenMPI", ""] = "OpenMPI"
    ssh_auth_mount_path: str = Field("/root/.ssh", max_length=4096)
    run_launcher_as_node: bool = False


class FluxPolicy(ApiModel):
    num_proc_per_node: Int32 = Field(
        1, json_schema_extra=cel(("self >= 1", "NumProcPerNode in fluxPolicy must be >= 1"))
    )


class EmptyPolicy(ApiModel):
    """A policy source with no settings (xgboost, jax): its presence chooses the policy."""


_ONE_POLICY = cel(
    (
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
        ".filter(x, x).size() <= 1",
        "Only one of the policy can be configured",
    )
)


class MLPolicy(ApiModel):
    """numNodes and at most one framework source; none is plain ML (each node runs the command)."""

    model_config = _config(**_ONE_POLICY)

    num_nodes: Int32 | None = None
    torch: TorchPolicy | None = None
    mpi: MPIPolicy | None = None
    xgboost: EmptyPolicy | None = None
    jax: EmptyPolicy | None = None
    flux: FluxPolicy | None = None


class Coscheduling(ApiModel):
    schedule_timeout_seconds: Int32 = 60


class NetworkTopology(ApiModel):
    """Volcano's network topology constraint for the job's pod group."""

    mode: Literal["hard", "soft"] = "hard"
    highest_tier_allowed: int = 1


class VolcanoPolicy(ApiModel):
    network_topology: NetworkTopology | None = None


class PodGroupPolicy(ApiModel):
    coscheduling: Coscheduling | None = None
    volcano: VolcanoPolicy | None = None


# JobSet's own types (sigs.k8s.io/jobset v1alpha2), as Trainer's runtime template embeds them.
# trainop accepts and keeps them; it does not act on them (docs/trainjob.md, "Against Trainer").


class DependsOn(ApiModel):
    name: str
    status: Literal["Ready", "Complete"]


class ReplicatedJob(ApiModel):
    """A JobSet replicated job; `template` is a batch/v1 JobTemplateSpec (pod template inside)."""

    name: str
    group_name: str = "default"
    replicas: Int32 = 1
    depends_on: list[DependsOn] | None = Field(
        None, max_length=5, json_schema_extra=markers(list_map("name"), cel(VALUE_IMMUTABLE))
    )
    template: dict[str, Any]


class Network(ApiModel):
    enable_dns_hostnames: bool | None = Field(None, alias="enableDNSHostnames")
    subdomain: str | None = None
    publish_not_ready_addresses: bool | None = None


class SuccessPolicy(ApiModel):
    operator: Literal["All", "Any"]
    target_replicated_jobs: list[str] | None = Field(None, json_schema_extra=ATOMIC)


class FailurePolicyRule(ApiModel):
    name: str
    action: Literal[
        "FailJobSet",
        "RestartJobSet",
        "RestartJobSetAndIgnoreMaxRestarts",
        "RestartJob",
        "RestartJobAndIgnoreMaxRestarts",
    ]
    on_job_failure_reasons: list[str] | None = None
    on_job_failure_message_patterns: list[str] | None = None
    target_replicated_jobs: list[str] | None = Field(None, json_schema_extra=ATOMIC)


class FailurePolicy(ApiModel):
    max_restarts: Int32 | None = None
    restart_strategy: Literal["Recreate", "BlockingRecreate", "InPlaceRestart"] = "Recreate"
    rules: list[FailurePolicyRule] | None = None


class StartupPolicy(ApiModel):
    startup_policy_order: Literal["AnyOrder", "InOrder"]


class Coordinator(ApiModel):
    replicated_job: str
    job_index: int | None = None
    pod_index: int | None = None


class RetentionPolicy(ApiModel):
    when_deleted: Literal["Delete", "Retain"] = "Delete"


_NO_CLAIM_NAMESPACE = cel(
    (
        "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
        "namespace cannot be set for VolumeClaimPolicies templates",
    )
)


class VolumeClaimPolicy(ApiModel):
    model_config = _config(**_NO_CLAIM_NAMESPACE)

    # PersistentVolumeClaims, typed in the CRD from the Kubernetes field table
    templates: list[dict[str, Any]] | None = Field(None, max_length=50, json_schema_extra=ATOMIC)
    retention_policy: RetentionPolicy | None = None


_STARTUP_OR_DEPENDS = cel(
    (
        "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
        "self.replicatedJobs.exists(x, has(x.dependsOn)))",
        "StartupPolicy and DependsOn APIs are mutually exclusive",
    )
)


class JobSetSpec(ApiModel):
    model_config = _config(**_STARTUP_OR_DEPENDS)

    replicated_jobs: list[ReplicatedJob] = Field(
        default_factory=list, json_schema_extra=list_map("name")
    )
    network: Network | None = Field(None, json_schema_extra=cel(VALUE_IMMUTABLE))
    success_policy: SuccessPolicy | None = Field(None, json_schema_extra=cel(VALUE_IMMUTABLE))
    failure_policy: FailurePolicy | None = Field(None, json_schema_extra=cel(VALUE_IMMUTABLE))
    startup_policy: StartupPolicy | None = Field(None, json_schema_extra=cel(VALUE_IMMUTABLE))
    coordinator: Coordinator | None = None
    volume_claim_policies: list[VolumeClaimPolicy] | None = Field(
        None, max_length=50, json_schema_extra=markers(ATOMIC, cel(VALUE_IMMUTABLE))
    )
    ttl_seconds_after_finished: Int32 | None = Field(None, ge=0)
    suspend: bool | None = None
    managed_by: str | None = None


class JobSetTemplate(ApiModel):
    model_config = _config(minProperties=1)

    metadata: dict[str, Any] | None = None  # labels and annotations for the JobSet
    spec: JobSetSpec = Field(default_factory=JobSetSpec)


class TrainingRuntimeSpec(ApiModel):
    model_config = _config(minProperties=1)

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
